"""Unit tests: one module or rule at a time, in this process; the inner loop (docs/usage.md: the tests)."""
