"""The qwen3vl-image-evs and qwen3vl-expanded-positions targets: everything of them but their copies
(legacy/qwen3_vl_evs.py, optimized/qwen3_vl_evs.py).

inputs.py holds the input models, record.py the records (TARGETS), oracles.py the invariants and references,
planted.py the planted bugs and benign refactors.
"""
