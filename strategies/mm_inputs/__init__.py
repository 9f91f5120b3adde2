"""The mm_inputs targets: everything of them but their copies.

Targets: mm-batched-field-reduce-data, mm-flat-field-reduce-data. inputs.py holds the input models, record.py
the records (TARGETS), oracles.py the invariants, reference and consumer, planted.py the planted bugs and
benign refactors. The copies are legacy/mm_inputs.py and optimized/mm_inputs.py.
"""
