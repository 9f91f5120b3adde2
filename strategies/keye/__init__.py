"""The keye targets: everything of them but their copies.

Targets: keye-encoder-rope, keye-vision-split, keye-process-image, keye-process-video. inputs.py holds the
input models, record.py the records (TARGETS), oracles.py the invariants, reference and consumer, planted.py
the planted bugs and benign refactors. The copies are legacy/keye.py and optimized/keye.py.
"""
