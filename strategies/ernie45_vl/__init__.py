"""The ernie45_vl targets: everything of them but their copies.

Targets: ernie-rot-pos-emb, ernie-encoder-metadata, ernie-encoder-metadata-graph, ernie-resampler-placeholder.
inputs.py holds the input models, record.py the records (TARGETS), oracles.py the invariants, reference and
consumer, planted.py the planted bugs and benign refactors. The copies are legacy/ernie45_vl.py and
optimized/ernie45_vl.py.
"""
