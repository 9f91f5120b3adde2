"""paddleocr_vl (docs/design.md row 5): the copies, their input models and the
known wide-contract divergences of SiglipEncoder.forward."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import legacy.paddleocr_vl as legacy_copy
import optimized.paddleocr_vl as optimized_copy
from fuzz.targets import lookup
from strategies.paddleocr_vl.inputs import PaddleOCREncodeImageInputs, PaddleOCREncoderInputs, grid_position_ids
from strategies.paddleocr_vl.planted import WIDE_BUGS
from tests.support import ROOT, fuzz

ENCODER, ENCODE_IMAGE = "paddleocr-encoder", "paddleocr-encode-image"
WITHOUT_FINDINGS = "strategies.paddleocr_vl.inputs:ENCODER_INPUTS_WITHOUT_FINDINGS"
UPSTREAM = {"legacy": "/tmp/vllm-0.27.1", "optimized": "/tmp/vllm-0.28.0"}
MODEL_PATH = "vllm/model_executor/models/paddleocr_vl.py"


def target(name: str):
    (found,) = lookup([name])
    return found


def _docstring_span(lines: list[str]) -> range:
    start = next(i for i, line in enumerate(lines) if line.startswith('"""Copied from vllm'))
    end = lines.index('"""', start + 1)
    return range(start, end + 1)


@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_copy_lines_are_upstream_or_marked_adapted(side):
    upstream = Path(UPSTREAM[side], MODEL_PATH)
    if not upstream.exists():
        pytest.skip(f"upstream source not unpacked at {upstream} (see docs/design.md)")
    known = set(upstream.read_text().splitlines())
    lines = (ROOT / side / "paddleocr_vl.py").read_text().splitlines()
    docstring = _docstring_span(lines)
    stray = [
        line for i, line in enumerate(lines)
        if i not in docstring and line.strip() and "# ADAPTED" not in line and line not in known
    ]
    assert stray == []


@pytest.mark.parametrize("name", [ENCODER, ENCODE_IMAGE])
@pytest.mark.parametrize("contract", ["caller", "wide"])
def test_specs_are_plain_json(name, contract):
    model = target(name).input_model()

    @settings(max_examples=30, deadline=None, database=None)
    @given(model.specs(["cpu", "cuda"], contract))
    def check(spec):
        assert json.loads(json.dumps(spec)) == spec

    check()


@pytest.mark.parametrize("name", [ENCODER, ENCODE_IMAGE])
def test_caller_contract_agrees(name):
    outcome = fuzz(target(name), max_examples=150)
    assert not outcome.failures, [f.mismatches for f in outcome.failures]


@pytest.mark.parametrize("name", [ENCODER, ENCODE_IMAGE])
def test_wide_contract_agrees_without_the_known_findings(name):
    chosen = target(name)
    if name == ENCODER:
        chosen = dataclasses.replace(chosen, inputs=WITHOUT_FINDINGS)
    outcome = fuzz(chosen, max_examples=150, contract="wide")
    assert not outcome.failures, [(f.spec, f.mismatches) for f in outcome.failures]


def _explained(failure) -> str | None:
    """Which known wide-contract difference a failure is, if any.

    * ids past the grid: 0.27.1 sized the rope table from the ids
      (``pids.max() + 1``), 0.28.0 from the grids (``max(h, w)``), so explicit
      ids past the grid only fit the former (0.28.0: IndexError).
    * no patches: grids whose extents multiply to zero give no ids; 0.27.1's
      ``pids.max()`` of nothing raises, 0.28.0 needs no ids to size the table.
    * empty batch with explicit ids: ``pids.max()`` of nothing (RuntimeError)
      against ``max()`` of no grids (ValueError).

    No 0.28.0 caller reaches any of them: explicit ids are never passed
    (SiglipVisionModel.forward has no such parameter) and encode_image always
    passes one processor-made grid.
    """
    spec, legacy, optimized = failure.spec, failure.legacy.raised, failure.optimized.raised
    legacy_type = legacy.type_name if legacy else None
    optimized_type = optimized.type_name if optimized else None
    patches = sum(t * h * w for t, h, w in spec["grids"])
    if patches == 0 and legacy_type == "RuntimeError":
        if spec["grids"] and optimized_type is None:
            return "no patches"
        if not spec["grids"] and spec["ids"] != "none" and optimized_type == "ValueError":
            return "empty batch with explicit ids"
    if spec["ids"] == "past_grid" and legacy_type is None and optimized_type == "IndexError":
        return "ids past the grid"
    return None


def test_wide_encoder_divergences_are_the_known_ones():
    outcome = fuzz(target(ENCODER), max_examples=200, contract="wide")
    found = {_explained(failure) for failure in outcome.failures}
    assert None not in found, [(f.spec, f.mismatches) for f in outcome.failures if _explained(f) is None]
    assert "ids past the grid" in found


def test_pastgrid_position_ids_gather_rows_legacy_built():
    config = dict(hidden_size=4, num_attention_heads=1, num_hidden_layers=1)
    grid, ids = [(1, 1, 2)], torch.tensor([0, 2])
    embeds = torch.ones(1, 2, 4)
    outputs = {}
    for copy in (legacy_copy, optimized_copy):
        backend = copy.AttentionBackendEnum.TORCH_SDPA
        encoder = copy.SiglipEncoder(copy.PretrainedConfig(**config, attn_backend=backend))
        try:
            encoder(embeds, cu_seqlens=[0, 2], image_grid_thw=grid, height_position_ids=ids, width_position_ids=ids)
            outputs[copy.__name__] = encoder.layers[0].received[0]["rotary_pos_emb"]
        except IndexError as exc:
            outputs[copy.__name__] = exc
    assert outputs["legacy.paddleocr_vl"].shape == (2, 2)
    assert isinstance(outputs["optimized.paddleocr_vl"], IndexError)


@pytest.mark.parametrize("plant", WIDE_BUGS, ids=lambda p: p.name)
def test_wide_only_planted_bug_is_reported(plant):
    chosen = dataclasses.replace(plant.target(), inputs=WITHOUT_FINDINGS)
    assert not fuzz(chosen, max_examples=100).failures, "caller inputs should not reach this bug"
    outcome = fuzz(chosen, max_examples=200, contract="wide")
    assert outcome.failures and outcome.first_failure_at <= 200


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=3))
@settings(max_examples=40, deadline=None, database=None)
def test_explicitgrid_position_ids_are_the_ids_the_encoder_derives(grids):
    """The wide model's "grid" ids must be what the ids=None branch builds."""
    backend = legacy_copy.AttentionBackendEnum.TORCH_SDPA
    config = legacy_copy.PretrainedConfig(hidden_size=4, num_attention_heads=1, num_hidden_layers=1,
                                          attn_backend=backend)
    total = sum(t * h * w for t, h, w in grids)
    embeds, cu = torch.ones(1, total, 4), [0, total]
    derived, given_ids = legacy_copy.SiglipEncoder(config), legacy_copy.SiglipEncoder(config)
    derived(embeds, cu_seqlens=cu, image_grid_thw=list(grids))
    h_ids, w_ids = grid_position_ids([list(g) for g in grids])
    given_ids(embeds, cu_seqlens=cu, image_grid_thw=list(grids), height_position_ids=h_ids, width_position_ids=w_ids)
    assert torch.equal(derived.layers[0].received[0]["rotary_pos_emb"],
                       given_ids.layers[0].received[0]["rotary_pos_emb"])


def test_encoder_caller_contract_is_what_encode_image_stages():
    """The encoder's caller specs describe what 0.28.0's encode_image hands
    the tower: one tuple of Python ints and an int32 cu_seqlens tensor."""
    image_spec = {"device": "cpu", "grids": [[2, 4, 2], [1, 2, 2]], "image": 0, "grid_form": "device_tensor",
                  "grid_dtype": "int64", "patch_size": 1, "pixel_dtype": "float32", "visual_dtype": "float32",
                  "seed": 0}
    staged = PaddleOCREncodeImageInputs().materialize(image_spec, target(ENCODE_IMAGE).impl("optimized"), "optimized")()
    assert staged["image_grid_thw"] == [(2, 4, 2)]
    assert all(type(n) is int for n in staged["image_grid_thw"][0])
    assert staged["cu_seqlens"].dtype == torch.int32 and staged["cu_seqlens"].tolist() == [0, 16]

    @settings(max_examples=20, deadline=None, database=None)
    @given(PaddleOCREncoderInputs().specs(["cpu"], "caller"))
    def check(spec):
        assert len(spec["grids"]) == 1 and spec["grid_form"] == "tuples" and spec["ids"] == "none"
        assert (spec["cu_form"], spec["cu_dtype"]) == ("device_tensor", "int32")
        t, h, w = spec["grids"][0]
        assert spec["cu_seqlens"] == [0, t * h * w]

    check()


# -- encode_image in each release's form (0.33.0: a list of grid tuples) ---------

def _encode_image_impl(side: str, spec: str = "copy"):
    from fuzz.releases.sides import bind

    (target,) = lookup(["paddleocr-encode-image"])
    return bind(target, **{side: spec}).impl(side)


def test_copies_keep_the_grid_row_form():
    from strategies.paddleocr_vl.inputs import encode_image_grid_form

    assert encode_image_grid_form(_encode_image_impl("legacy")) == "row"
    assert encode_image_grid_form(_encode_image_impl("optimized")) == "row"


@pytest.mark.parametrize(("spec", "form"), [("vllm==0.28.0", "row"), ("vllm==0.32.0", "row"),
                                            ("vllm==0.33.0", "tuples")])
def test_a_rebuilt_side_gets_its_release_form(spec, form):
    from strategies.paddleocr_vl.inputs import encode_image_grid_form

    impl = _encode_image_impl("optimized", spec)
    assert encode_image_grid_form(impl) == form
    call = PaddleOCREncodeImageInputs().materialize(
        {"device": "cpu", "grids": [[1, 2, 2], [1, 2, 4]], "image": 1, "grid_form": "device_tensor",
         "grid_dtype": "int64", "patch_size": 1, "pixel_dtype": "float32", "visual_dtype": "float32", "seed": 0},
        impl, "optimized")
    kwargs = call()
    assert kwargs["image_grid_thw"] == [(1, 2, 4)] and kwargs["cu_seqlens"].tolist() == [0, 8]


def test_an_unversioned_side_is_read_off_its_annotation(monkeypatch):
    """A checkout has no release: the annotation text of image_grid_thw decides;
    one the rule does not know makes the input model not fit (cannot-build)."""
    import types

    from fuzz.targets import Impl
    from strategies.paddleocr_vl.inputs import encode_image_grid_form

    def impl_of(annotation: str) -> Impl:
        def encode_image(self, pixel_values, image_grid_thw): ...
        encode_image.__annotations__ = {"image_grid_thw": annotation}
        return Impl("x:PaddleOCRVLForConditionalGeneration.encode_image", encode_image, object,
                    types.ModuleType("rebuilt"))

    assert encode_image_grid_form(impl_of("list[tuple[int, int, int]]")) == "tuples"
    assert encode_image_grid_form(impl_of("torch.Tensor")) == "row"
    unknown = impl_of("Sequence[GridTHW]")
    assert encode_image_grid_form(unknown) is None
    assert "annotation" in PaddleOCREncodeImageInputs().fits(unknown)


def test_0_28_against_0_33_agrees():
    from fuzz.config import RunConfig
    from fuzz.engine.runner import fuzz_target

    for name in ("paddleocr-encode-image", "paddleocr-encoder"):
        (target,) = lookup([name])
        config = RunConfig(devices=("cpu",), seed=0, contract="caller", max_examples=30,
                           legacy="vllm==0.28.0", optimized="vllm==0.33.0")
        outcome = fuzz_target(target, config)
        assert outcome.cannot_build is None and outcome.examples == 30, outcome.cannot_build
        assert not outcome.failures, [(f.spec, f.mismatches) for f in outcome.failures]


def test_a_side_the_input_model_does_not_fit_cannot_build(monkeypatch):
    from fuzz.releases.sides import CannotBuild, bind

    monkeypatch.setattr(PaddleOCREncodeImageInputs, "fits", lambda self, impl: "no known grid form")
    (target,) = lookup(["paddleocr-encode-image"])
    with pytest.raises(CannotBuild, match="the input model does not fit 0.33.0: no known grid form"):
        bind(target, optimized="vllm==0.33.0")
