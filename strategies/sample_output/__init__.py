"""The sampling-mask-tensors-to-cpu target: everything of it but its copies
(legacy/sample_output.py, optimized/sample_output.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants (and a
reference or consumer where one applies), planted.py the planted bugs and benign refactors.
"""
