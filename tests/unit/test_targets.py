"""The catalog covers every function of docs/design.md's table, and every target
agrees, has a strategy, a planted bug and a benign refactor."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys

import pytest

import tests.planted as planted
from fuzz.cli import main
from fuzz.targets import catalog_targets, resolve_impl
from tests.support import ROOT

TARGETS = catalog_targets()

M = "vllm/model_executor/models/"
# docs/design.md's "Functions in scope" table, rows 1-12 (upstream path :: qualname).
DESIGN_TABLE = {
    1: [M + "glm4_1v.py::Glm4vVisionEmbeddings.forward", M + "glm4_1v.py::Glm4vVisionTransformer.pos_embeds_interpolate"],
    2: [M + "keye.py::KeyeSiglipEncoder.forward"],
    3: [M + "keye.py::KeyeSiglipVisionTransformer.forward"],
    4: [M + "keye.py::BaseKeyeModule._process_image_input", M + "keye.py::BaseKeyeModule._process_video_embeds"],
    5: [M + "paddleocr_vl.py::SiglipEncoder.forward", M + "paddleocr_vl.py::PaddleOCRVLForConditionalGeneration.encode_image"],
    6: [M + "ernie45_vl.py::Ernie4_5_VisionTransformer.rot_pos_emb"],
    7: [M + "ernie45_vl.py::Ernie4_5_VisionTransformer.prepare_encoder_metadata", M + "ernie45_vl.py::Ernie4_5_VisionTransformer.forward"],
    8: [M + "ernie45_vl.py::VariableResolutionResamplerModel.forward"],
    9: [M + "diffusion_gemma.py::DiffusionGemmaRequestStates.add_request", M + "diffusion_gemma.py::DiffusionGemmaRequestStates.remove_request",
        M + "diffusion_gemma.py::DiffusionGemmaRequestStates.init_canvas", M + "diffusion_gemma.py::DiffusionGemmaModelState.add_request"],
    10: [M + "diffusion_gemma.py::DiffusionSampler.__call__"],
    11: ["vllm/third_party/flash_linear_attention/ops/index.py::prepare_chunk_indices",
         "vllm/third_party/flash_linear_attention/ops/index.py::prepare_chunk_offsets"],
    12: [M + "ultravox.py::UltravoxMultiModalProcessor._get_mm_fields_config",
         M + "interns1.py::InternS1MultiModalProcessor._get_mm_fields_config",
         M + "phi4mm.py::Phi4MMMultiModalProcessor._get_mm_fields_config",
         M + "keye.py::KeyeMultiModalProcessor._get_mm_fields_config"],
}
NAMES = sorted(t.name for t in TARGETS)


@pytest.mark.parametrize("row", sorted(DESIGN_TABLE))
def test_every_design_row_is_covered(row):
    covered = {u for t in TARGETS for u in t.upstream}
    assert set(DESIGN_TABLE[row]) <= covered, set(DESIGN_TABLE[row]) - covered


@pytest.mark.parametrize("name", NAMES)
def test_every_target_has_a_planted_bug_and_a_benign_refactor(name):
    assert any(p.base_target == name for p in planted.BUGS), f"{name}: no planted bug"
    assert any(p.base_target == name for p in planted.BENIGN), f"{name}: no benign refactor"


def _copy_module(target) -> str:
    """The copy module both sides of ``target`` live in (``glm4_1v``): the same name under legacy/ and optimized/."""
    legacy, optimized = (getattr(target, side).partition(":")[0].split(".") for side in ("legacy", "optimized"))
    assert legacy[0] == "legacy" and optimized[0] == "optimized" and len(legacy) == len(optimized) == 2, target.name
    assert legacy[1] == optimized[1], f"{target.name}: legacy.{legacy[1]} vs optimized.{optimized[1]}"
    return legacy[1]


@pytest.mark.parametrize("name", NAMES)
def test_the_input_model_lives_in_the_strategy_module_named_after_the_copy(name):
    target = {t.name: t for t in TARGETS}[name]
    assert target.inputs.partition(":")[0] == f"strategies.{_copy_module(target)}.inputs", target.inputs


COPY_FILES = sorted(path.relative_to(ROOT).as_posix()
                    for side in ("legacy", "optimized") for path in (ROOT / side).glob("*.py"))


@pytest.mark.parametrize("path", COPY_FILES)
def test_no_copy_imports_the_engine(path):
    """The copies stand alone: their vllm helpers are copied beside them, never taken from fuzz."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"), path)
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module]
    assert not [name for name in imported if name.split(".")[0] == "fuzz"], f"{path} imports the engine"


@pytest.mark.parametrize("name", NAMES)
def test_files_names_the_copies_and_the_strategy_module(name):
    target = {t.name: t for t in TARGETS}[name]
    module = _copy_module(target)
    files = target.files()
    assert files == {"legacy": f"legacy/{module}.py", "optimized": f"optimized/{module}.py",
                     "inputs": f"strategies/{module}/inputs.py"}
    assert all((ROOT / path).is_file() for path in files.values())
    assert target.as_json()["files"] == files


def test_files_are_found_without_importing_the_modules():
    # The registry imports each target's record (and its folder's __init__), nothing else of it.
    code = ("import sys; from fuzz.targets import catalog_targets; [t.files() for t in catalog_targets()]; "
            "loaded = [m for m in sys.modules if m.split('.')[0] in ('torch', 'legacy', 'optimized', 'strategies') "
            "and m != 'strategies' and m.count('.') != 1 and not m.endswith('.record')]; "
            "assert not loaded, loaded")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_files_name_the_module_a_path_names_or_none():
    mutant = planted.BUGS[0].target()  # built in memory, reached as an attribute of tests.planted
    assert mutant.files()["optimized"] == "tests/planted/__init__.py"
    selftest_like = dataclasses.replace(TARGETS[0], legacy="fuzz._selftest_mutant_x:f", optimized="nowhere.at_all:f")
    assert selftest_like.files()["legacy"] is None and selftest_like.files()["optimized"] is None


def test_list_shows_each_targets_files(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for target in TARGETS:
        row = next(line for line in lines if line.startswith(target.name + " "))
        assert all(path in row.split() for path in target.files().values()), row
    assert main(["list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["files"] for e in entries] == [t.files() for t in TARGETS]


def test_impl_carries_the_module_its_path_resolves_to():
    import optimized.glm4_1v

    impl = resolve_impl("optimized.glm4_1v:Glm4vVisionEmbeddings.forward")
    assert impl.module is optimized.glm4_1v and impl.owner is optimized.glm4_1v.Glm4vVisionEmbeddings
    function = resolve_impl("optimized.fla_index:prepare_chunk_offsets")
    assert function.owner is None and function.module.__name__ == "optimized.fla_index"
    # A planted mutant is an attribute of tests.planted: its own module, not the package, is the side's module.
    plant = next(p for p in planted.BUGS if p.module == "optimized.glm4_1v")
    mutant = resolve_impl(plant.target().optimized)
    assert mutant.module is not optimized.glm4_1v and mutant.module.__name__.startswith("tests.planted._")
    assert mutant.owner is mutant.module.Glm4vVisionEmbeddings and mutant.function is mutant.owner.forward
