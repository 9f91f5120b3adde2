"""A target module whose first fuzz worker dies while importing it, before its first example.

Under CUDA MPS that is how a worker looks when another client's fault ended its context while it
was starting; tests/e2e/test_gpushare.py checks that a fresh worker is started instead of a fuzzer error.
Registered with ``SYNCFUZZ_TARGET_MODULES=tests.dies_at_start``; a marker file
(``SYNCFUZZ_TEST_DIES_AT_START``) makes it die once.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from fuzz.targets import catalog_targets

CATALOG = catalog_targets()

_MARKER = os.environ.get("SYNCFUZZ_TEST_DIES_AT_START")
if _MARKER and "--serve" in sys.argv and not os.path.exists(_MARKER):  # in a fuzz worker, the first time
    open(_MARKER, "w").close()
    os.abort()

TARGETS = [dataclasses.replace({t.name: t for t in CATALOG}["fla-chunk-offsets"], name="starts-after-a-death")]
