"""The tensor-data target: everything of it but its copies (legacy/v1_tensor_data.py, optimized/v1_tensor_data.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants (and a
reference or consumer where one applies), planted.py the planted bugs and benign refactors.
"""
