"""Reach: what each side ran (collect, monitor) and how much of a change the run covered (changes).

docs/reach.md. Above the release tooling, whose sources it reads, and the code comparison (fuzz.code).
"""
