"""The torch_utils targets: everything of them but their copies.

Targets: async-tensor-h2d. inputs.py holds the input models, record.py the records (TARGETS), oracles.py the
invariants, reference and consumer, planted.py the planted bugs and benign refactors. The copies are
legacy/torch_utils.py and optimized/torch_utils.py.
"""
