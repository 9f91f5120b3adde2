"""The qwen2_vl targets: everything of them but their copies.

Targets: qwen2-vl-rot-pos-emb. inputs.py holds the input models, record.py the records (TARGETS), oracles.py
the invariants, reference and consumer, planted.py the planted bugs and benign refactors. The copies are
legacy/qwen2_vl.py and optimized/qwen2_vl.py.
"""
