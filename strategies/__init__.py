"""The targets' own code, one folder per copy module, and the strategies they share.

``strategies/<module>/`` holds everything of a target but its two copies (``legacy/<module>.py``,
``optimized/<module>.py``): ``inputs.py`` (its input models), ``record.py`` (its ``TARGETS``), ``oracles.py``
(invariants, reference, consumer) and ``planted.py`` (planted bugs and benign refactors). The engine finds
the records by name (fuzz.targets.catalog_targets); the folder imports the engine only through fuzz.api.

Strategies draw *specs*: plain JSON data (ints, lists, dtype and device names, seeds). Input models turn
a spec into fresh tensors for each side. Specs are what Hypothesis shrinks, what the example database
stores and what a repro file saves, so a saved failure never needs pickle. Shared factories live beside
the folders: ``common.py`` (devices, dtypes, tensor forms, seeded floats), ``grids.py`` (``grid_thws``).
This package imports nothing, so listing the catalog costs no torch import.
"""
