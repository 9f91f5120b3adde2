"""The minicpmv-resampler-forward target: everything of it but its copies (legacy/minicpmv.py, optimized/minicpmv.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants (and a
reference or consumer where one applies), planted.py the planted bugs and benign refactors.
"""
