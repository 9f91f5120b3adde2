"""Planted bugs and benign refactors for the tensor-data target (optimized/v1_tensor_data.py).

Scaffolded by `python -m fuzz new-target`. Each is a one-edit mutant of the optimized copy:
Plant(name, base_target, module, old, new, why); ``old`` must occur once in the copy.
tests/unit/test_targets.py wants at least one of each; tests/planted collects them. A bug both copies share,
which only the oracles can see, is a ``SharedPlant`` in ``SHARED_BUGS`` (fuzz.api).
"""

from fuzz.api import Plant

_OPT = "optimized.v1_tensor_data"

# e.g. Plant("planted-tensor-data-...", "tensor-data", _OPT,
#            "<upstream text>", "<the slip>", "<what goes wrong>")
BUGS: list[Plant] = []

# e.g. Plant("benign-tensor-data-...", "tensor-data", _OPT,
#            "<upstream text>", "<an equivalent>", "<why it is equivalent>")
BENIGN: list[Plant] = []
