"""The qwen2_5_vl targets: everything of them but their copies.

Targets: qwen25-vl-rope-by-thw, qwen25-vl-encoder-metadata. inputs.py holds the input models, record.py the
records (TARGETS), oracles.py the invariants and references, planted.py the planted bugs and benign
refactors. The copies are legacy/qwen2_5_vl.py and optimized/qwen2_5_vl.py.
"""
