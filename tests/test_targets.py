"""The catalog covers every function of DESIGN.md's table, and every target
agrees, has a strategy, a planted bug and a benign refactor."""

from __future__ import annotations

import pytest

import tests.planted as planted
from fuzz.catalog import TARGETS
from tests.support import fuzz

M = "vllm/model_executor/models/"
# DESIGN.md's "Functions in scope" table, rows 1-12 (upstream path :: qualname).
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


@pytest.mark.parametrize("name", NAMES)
def test_every_target_agrees_on_cpu_under_the_caller_contract(name):
    target = {t.name: t for t in TARGETS}[name]
    outcome = fuzz(target, max_examples=40, seed=7)
    assert outcome.examples >= 40 and not outcome.failures, [(f.verdict, f.spec) for f in outcome.failures]
