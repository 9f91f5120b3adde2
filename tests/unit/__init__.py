"""Unit tests: one module or rule at a time, in this process; the inner loop (README: Tests)."""
