"""Reach of a side rebuilt from a source: which definitions count as the source's (docs/reach.md).

A definition whose header the copy marks ADAPTED keeps the copy's text in a rebuilt side: it is the harness'
code, and a side that entered only such stand-ins is ``unreached``. A source holding the claimed files exactly
as the release the copy was taken from is what the copy stands for: there its stand-ins count, as the copy's
do. legacy/ernie45_vl.py's ``prepare_encoder_metadata`` is the copy's extraction of 0.27.1's ``forward``.
"""

from __future__ import annotations

import shutil

from fuzz.config import RunConfig
from fuzz.engine.runner import fuzz_target
from fuzz.releases.packs import SHIPPED_PACKS
from fuzz.targets import lookup

ERNIE = "vllm/model_executor/models/ernie45_vl.py"
TARGET = "ernie-encoder-metadata"


def run(legacy: str) -> str:
    (target,) = lookup([TARGET])
    config = RunConfig(targets=(TARGET,), legacy=legacy, optimized="vllm==0.28.0", max_examples=4, isolated=False,
                       confirm=0, coverage=True)
    return fuzz_target(target, config).entry().verdict_on("cpu")


def test_the_copys_own_release_as_a_side_counts_the_copys_stand_ins():
    assert run("vllm==0.27.1") == "agree"
    assert run("copy") == "agree"


def test_a_source_whose_claimed_file_differs_from_the_copys_release_does_not(tmp_path):
    root = tmp_path / "vllm-0.27.1-edited"
    shutil.copytree(SHIPPED_PACKS / "vllm-0.27.1", root)
    (root / "MANIFEST.json").unlink()
    (root / "vllm" / "_version.py").write_text('__version__ = version = "0.27.1"\n')
    file = root / ERNIE
    file.write_text(file.read_text() + "\n# a branch's edit: the stand-ins no longer stand for this file\n")
    assert run(str(root)) == "unreached"
