"""The fla_index targets: everything of them but their copies.

Targets: fla-chunk-indices, fla-chunk-offsets. inputs.py holds the input models, record.py the records
(TARGETS), oracles.py the invariants, reference and consumer, planted.py the planted bugs and benign
refactors. The copies are legacy/fla_index.py and optimized/fla_index.py.
"""
