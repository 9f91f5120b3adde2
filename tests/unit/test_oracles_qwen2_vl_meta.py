"""The qwen2-vl-encoder-metadata target's invariants, each broken by a hand-made output (strategies/qwen2_vl_meta/oracles.py).

Scaffolded by `python -m fuzz new-target`: a test per invariant, on an output that breaks it, and one on an
output that keeps it (docs/adding-a-target.md, step 3).
"""

from strategies.qwen2_vl_meta.oracles import qwen2_vl_meta_output_means_what_upstream_says


def test_qwen2_vl_meta_output_means_what_upstream_says_reports_a_broken_output():
    spec: dict = {}  # TODO: a spec the input model could draw
    broken = None  # TODO: an output that breaks the invariant
    assert qwen2_vl_meta_output_means_what_upstream_says(spec, broken) is not None
