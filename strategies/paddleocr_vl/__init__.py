"""The paddleocr_vl targets: everything of them but their copies.

Targets: paddleocr-encoder, paddleocr-encode-image. inputs.py holds the input models, record.py the records
(TARGETS), oracles.py the invariants, reference and consumer, planted.py the planted bugs and benign
refactors. The copies are legacy/paddleocr_vl.py and optimized/paddleocr_vl.py.
"""
