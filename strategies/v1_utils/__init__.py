"""The v1_utils targets: everything of them but their copies.

Targets: cpu-gpu-buffer-copy-to-gpu. inputs.py holds the input models, record.py the records (TARGETS),
oracles.py the invariants, reference and consumer, planted.py the planted bugs and benign refactors. The
copies are legacy/v1_utils.py and optimized/v1_utils.py.
"""
