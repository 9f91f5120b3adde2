"""The commands as functions: what the CLI (fuzz/cli.py) parses for.

replay (``replay FILE|DIR``), coverage (``coverage REPORT``), corpusmerge (``corpus-merge``).
"""
