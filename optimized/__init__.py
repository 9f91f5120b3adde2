"""Functions as they are in vllm 0.28.0, the first release after PR #52369.

Each module names the upstream file, qualnames and version it was copied from.
Lines that differ from upstream carry an ``# ADAPTED:`` comment saying why.
"""
