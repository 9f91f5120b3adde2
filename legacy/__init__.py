"""The legacy copies: each function as it was in its target's legacy release -- vllm 0.27.1 (the
last release before PR #52369) for PR #52369's targets, 0.29.0 for v1_utils (``Target.versions``).

Each module names the upstream file, qualnames and version it was copied from.
Lines that differ from upstream carry an ``# ADAPTED:`` comment saying why.
"""
