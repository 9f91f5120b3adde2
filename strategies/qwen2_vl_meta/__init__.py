"""The qwen2-vl-encoder-metadata target: everything of it but its copies
(legacy/qwen2_vl_meta.py, optimized/qwen2_vl_meta.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants (and a
reference or consumer where one applies), planted.py the planted bugs and benign refactors.
"""
