"""The make-local-attention-virtual-batches and make-kv-sharing-fast-prefill-metadata targets: everything of them
but their copies (legacy/attn_backend_utils.py, optimized/attn_backend_utils.py).

inputs.py holds the input models, record.py the records (TARGETS), oracles.py the invariants, planted.py the
planted bugs and benign refactors.
"""
