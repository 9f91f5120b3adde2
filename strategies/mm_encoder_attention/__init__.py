"""The mm_encoder_attention targets: everything of them but their copies.

Targets: mm-encoder-seq-lens. inputs.py holds the input models, record.py the records (TARGETS), oracles.py
the invariants, reference and consumer, planted.py the planted bugs and benign refactors. The copies are
legacy/mm_encoder_attention.py and optimized/mm_encoder_attention.py.
"""
