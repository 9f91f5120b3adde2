"""The optimized copies: each function as it is in its target's optimized release -- vllm 0.28.0 (the
first release after PR #52369) for PR #52369's targets, 0.30.0 for v1_utils (``Target.versions``).

Each module names the upstream file, qualnames and version it was copied from.
Lines that differ from upstream carry an ``# ADAPTED:`` comment saying why.
"""
