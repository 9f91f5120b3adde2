"""Tests that need a CUDA device (skipped elsewhere); scripts/gpu_check.sh runs them on the H200."""
