"""A stand-in vllm for the --upstream tests (tests/test_upstream.py): only what the fuzzer imports."""
