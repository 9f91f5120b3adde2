"""The gdn_attn targets: everything of them but their copies.

Targets: gdn-cudagraph-capture-metadata. inputs.py holds the input models, record.py the records (TARGETS),
oracles.py the invariants, reference and consumer, planted.py the planted bugs and benign refactors. The
copies are legacy/gdn_attn.py and optimized/gdn_attn.py.
"""
