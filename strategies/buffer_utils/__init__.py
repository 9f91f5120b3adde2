"""The buffer_utils targets: everything of them but their copies.

Targets: staged-write-tensor-apply-write, uva-buffer-pool-copy-to-uva, fused-staged-writer-apply. inputs.py
holds the input models, record.py the records (TARGETS), oracles.py the invariants, reference and consumer,
planted.py the planted bugs and benign refactors. The copies are legacy/buffer_utils.py and
optimized/buffer_utils.py.
"""
