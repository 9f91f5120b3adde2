"""The qwen25-vl-image-evs and qwen25-vl-video-evs targets: everything of them but their copies
(legacy/qwen2_5_vl_evs.py, optimized/qwen2_5_vl_evs.py).

inputs.py holds the input models, record.py the records (TARGETS), oracles.py the invariants and references,
planted.py the planted bugs and benign refactors.
"""
