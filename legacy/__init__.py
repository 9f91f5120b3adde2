"""Functions as they were in vllm 0.27.1, the last release before PR #52369.

Each module names the upstream file, qualnames and version it was copied from.
Lines that differ from upstream carry an ``# ADAPTED:`` comment saying why.
"""
