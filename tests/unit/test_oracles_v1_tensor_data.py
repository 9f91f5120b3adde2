"""The tensor-data target's invariants, each broken by a hand-made output (strategies/v1_tensor_data/oracles.py).

Scaffolded by `python -m fuzz new-target`: a test per invariant, on an output that breaks it, and one on an
output that keeps it (docs/adding-a-target.md, step 3).
"""

from strategies.v1_tensor_data.oracles import v1_tensor_data_output_means_what_upstream_says


def test_v1_tensor_data_output_means_what_upstream_says_reports_a_broken_output():
    spec: dict = {}  # TODO: a spec the input model could draw
    broken = None  # TODO: an output that breaks the invariant
    assert v1_tensor_data_output_means_what_upstream_says(spec, broken) is not None
