"""End-to-end tests: whole fuzz runs, worker processes, replays, signals (README: Tests)."""
