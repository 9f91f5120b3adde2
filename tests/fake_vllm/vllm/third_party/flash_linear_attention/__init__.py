"""A stand-in vllm for the --upstream tests (tests/e2e/test_upstream.py): only what the fuzzer imports."""
