"""End-to-end tests: whole fuzz runs, worker processes, replays, signals (docs/usage.md: the tests)."""
