"""The qwen3vl-expanded-positions target: everything of it but its copies (legacy/qwen3_vl_evs.py, optimized/qwen3_vl_evs.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants (and a
reference or consumer where one applies), planted.py the planted bugs and benign refactors.
"""
