"""The keep-on-cpu-ernie-grid-thw target: everything of it but its copies (legacy/ernie_fields.py,
optimized/ernie_fields.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants and the consumer,
planted.py the planted bugs and benign refactors.
"""
