"""The idefics2_vision_model targets: everything of them but their copies.

Targets: idefics2-position-ids, idefics2-embeddings-forward. inputs.py holds the input models, record.py the
records (TARGETS), oracles.py the invariants, reference and consumer, planted.py the planted bugs and benign
refactors. The copies are legacy/idefics2_vision_model.py and optimized/idefics2_vision_model.py.
"""
