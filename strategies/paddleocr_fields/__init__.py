"""The keep-on-cpu-paddleocr-grid-thw target: everything of it but its copies (legacy/paddleocr_fields.py,
optimized/paddleocr_fields.py).

inputs.py holds the input model, record.py the record (TARGETS), oracles.py the invariants, planted.py the
planted bugs and benign refactors.
"""
