"""keye and paddleocr_vl oracles (strategies/keye/oracles.py, strategies/paddleocr_vl/oracles.py):
each invariant holds on a real copy's output and flags a hand-broken one, the
references match the copies and flag a broken output, the copies satisfy all
of it over the targets' own caller and wide specs, the consumers make their
reads without touching the output, and the bugs planted in both copies
(strategies/keye/planted.py, strategies/paddleocr_vl/planted.py) span both families; the fuzz that must
report each is tests/e2e/test_oracles.py."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from fuzz.config import RunConfig
from fuzz.engine.execute import run_example, run_side
from fuzz.oracles import Reference
from fuzz.oracles.compare import compare_values
from fuzz.records.verdicts import Verdict
from fuzz.targets import Comparison, lookup, resolve_object
from strategies.keye import oracles as K
from strategies.keye.planted import SHARED_BUGS as KEYE_SHARED
from strategies.paddleocr_vl import oracles as P
from strategies.paddleocr_vl.planted import SHARED_BUGS as PADDLE_SHARED
from tests.conftest import requires_cuda

SHARED_BUGS = [*KEYE_SHARED, *PADDLE_SHARED]

NAMES = ("keye-encoder-rope", "keye-vision-split", "keye-process-image", "keye-process-video",
         "paddleocr-encoder", "paddleocr-encode-image")
TUPLES = {"form": "tuple", "dtype": "int64", "whole_tensor": False}
GRIDS = [[1, 2, 4], [2, 2, 2]]  # h != w, t > 1: ids restart per frame and per image
SAMPLE = settings(max_examples=30, database=None, deadline=None, suppress_health_check=list(HealthCheck))


def target(name: str):
    (found,) = lookup([name])
    return found


def keye_encoder_spec(grids=GRIDS, **extra) -> dict:
    return {"device": "cpu", "heads": 1, "hidden_size": 8, "layers": 2, "dtype": "float32", "seed": 0, "grids": grids,
            "nesting": list(range(len(grids))), "grid_form": TUPLES, "position_ids": {"kind": "computed"}, **extra}


def keye_split_spec(grids=GRIDS, **extra) -> dict:
    sizes = [t * h * w for t, h, w in grids]
    return {"device": "cpu", "heads": 1, "hidden_size": 4, "layers": 1, "dtype": "float32", "seed": 0, "grids": grids,
            "nesting": list(range(len(grids))), "grid_form": TUPLES, "cu_seqlens": K.running_sum(sizes),
            "cu_form": "device_tensor", "cu_dtype": "int32", "use_rope": True, **extra}


def keye_metadata_spec(grids=GRIDS, **extra) -> dict:
    return {"device": "cpu", "seed": 0, "features": 2, "pixel_dtype": "float32", "tower_dtype": "bfloat16",
            "model": "keye", "grid_on": "cpu", "grid_dtype": "int64", "grids": grids, "embeds": False, **extra}


def paddle_encoder_spec(grids=([1, 2, 4],), **extra) -> dict:
    grids = [list(g) for g in grids]
    return {"device": "cpu", "num_heads": 1, "head_dim": 8, "num_layers": 2, "attn_backend": "FLASH_ATTN",
            "embeds_dtype": "float32", "seed": 0, "grids": grids, "grid_form": "tuples", "grid_dtype": "int64",
            "cu_seqlens": K.running_sum([t * h * w for t, h, w in grids]), "cu_form": "device_tensor",
            "cu_dtype": "int32", "groups": [], "ids": "none", "ids_dtype": "int64", "ids_on": "device", "ids_past": 1,
            **extra}


def paddle_image_spec(**extra) -> dict:
    return {"device": "cpu", "grids": [[1, 2, 4], [2, 2, 2]], "image": 1, "grid_form": "device_tensor",
            "grid_dtype": "int64", "patch_size": 1, "pixel_dtype": "float32", "visual_dtype": "bfloat16", "seed": 0,
            **extra}


SPECS = {"keye-encoder-rope": keye_encoder_spec, "keye-vision-split": keye_split_spec,
         "keye-process-image": keye_metadata_spec, "keye-process-video": keye_metadata_spec,
         "paddleocr-encoder": paddle_encoder_spec, "paddleocr-encode-image": paddle_image_spec}


def output(name: str, spec: dict, side: str = "optimized"):
    result = run_side(target(name), side, spec)
    assert result.ok, result.raised
    return result.value


def calls(out) -> list[dict]:
    return [layer[0] for layer in out["layers"]]


def replaced(tensor: torch.Tensor, index: int, value) -> torch.Tensor:
    """A copy of ``tensor`` with element/row ``index`` set to ``value``."""
    fresh = tensor.clone()
    fresh[index] = value
    return fresh


# --- every invariant: holds on a real output, flags a broken one ------------------------


def _keye_encoder_breaks(out):
    """(invariant, broken output) pairs for keye-encoder-rope."""
    def edit(layer: int, key: str, value):
        broken = copy.copy(out)
        broken["layers"] = [[dict(call) for call in layer_calls] for layer_calls in out["layers"]]
        broken["layers"][layer][0][key] = value
        return broken

    cos, sin = calls(out)[1]["rope_emb"]
    cu = calls(out)[0]["cu_seqlens"]
    twice = copy.copy(out)
    twice["layers"] = [out["layers"][0] * 2, out["layers"][1]]
    return [
        (K.keye_layers_share_metadata, edit(1, "rope_emb", (cos * 2, sin))),
        (K.keye_layers_share_metadata, twice),
        (K.keye_cu_seqlens_running_sum, edit(0, "cu_seqlens", replaced(cu, 2, 15))),
        (K.keye_cu_seqlens_running_sum, edit(0, "cu_seqlens", cu.long())),
        (K.keye_rope_rows_follow_tokens, edit(1, "rope_emb", (cos[:-1], sin[:-1]))),
        (K.keye_rope_rows_follow_tokens, edit(1, "rope_emb", (cos.double(), sin))),
        # token 12 is (0, 0) of image 2's second frame; token 13 is (0, 1)
        (K.keye_rope_depends_only_on_position, edit(1, "rope_emb", (replaced(cos, 12, cos[13]),
                                                                    replaced(sin, 12, sin[13])))),
        (K.keye_rope_depends_only_on_position, edit(1, "rope_emb", (replaced(cos, 12, cos[12] + 1), sin))),
    ]


def _keye_split_breaks(out):
    shifted = [torch.cat([out[0], out[1][:1]]), out[1][1:]]
    return [
        (K.keye_split_covers_sequence, [out[0][:-1], out[1]]),
        (K.keye_split_covers_sequence, [p.unsqueeze(0) for p in out]),
        (K.keye_split_sizes_follow_grids, shifted),
        (K.keye_split_sizes_follow_grids, out[:1]),
    ]


def _keye_metadata_breaks(out):
    def edit(key: str, value):
        kwargs = dict(out[0])
        kwargs[key] = value
        return [kwargs, out[1]]

    kwargs = out[0]
    return [
        (K.keye_metadata_cu_seqlens_running_sum, edit("cu_seqlens", torch.tensor([0, 8, 8], dtype=torch.int32))),
        (K.keye_metadata_cu_seqlens_running_sum, edit("cu_seqlens", kwargs["cu_seqlens"].long())),
        (K.keye_metadata_position_ids_follow_grid, edit("position_ids", torch.arange(16))),
        (K.keye_metadata_sample_indices_name_rows, edit("sample_indices", replaced(kwargs["sample_indices"], 8, 0))),
        (K.keye_metadata_grids_are_host_ints, edit("image_grid_thw", [tuple(torch.tensor(g)) for g in GRIDS])),
        (K.keye_metadata_grids_are_host_ints, edit("image_grid_thw", [(1, 2, 4), (1, 2, 2)])),
        (K.keye_metadata_grids_are_host_ints, edit("pixel_values", kwargs["pixel_values"].float())),
    ]


def _paddle_encoder_breaks(out):
    def edit(layer: int, key: str, value):
        broken = copy.copy(out)
        broken["layers"] = [[dict(call) for call in layer_calls] for layer_calls in out["layers"]]
        broken["layers"][layer][0][key] = value
        return broken

    first = calls(out)[0]
    rope = first["rotary_pos_emb"]
    return [
        (P.paddleocr_layers_share_metadata, edit(1, "max_seqlen", first["max_seqlen"] + 1)),
        (P.paddleocr_cu_seqlens_running_sum, edit(0, "cu_seqlens", torch.tensor([0, 7], dtype=torch.int32))),
        (P.paddleocr_cu_seqlens_running_sum, edit(0, "cu_seqlens", first["cu_seqlens"].long())),
        (P.paddleocr_max_seqlen_is_longest_image, edit(0, "max_seqlen", first["max_seqlen"] - 1)),
        (P.paddleocr_max_seqlen_is_longest_image, edit(0, "max_seqlen", None)),
        (P.paddleocr_rope_rows_follow_tokens, edit(0, "rotary_pos_emb", rope[:, :-1])),
        # token 4 is (1, 0), token 0 is (0, 0)
        (P.paddleocr_rope_depends_only_on_position, edit(0, "rotary_pos_emb", replaced(rope, 4, rope[0]))),
    ]


def _paddle_image_breaks(out):
    def edit(key: str, value):
        return {**out, key: value}

    return [
        (P.paddleocr_image_cu_seqlens_running_sum, edit("cu_seqlens", torch.tensor([0, 4], dtype=torch.int32))),
        (P.paddleocr_image_cu_seqlens_running_sum, edit("cu_seqlens", out["cu_seqlens"].long())),
        (P.paddleocr_image_position_ids_follow_grid, edit("position_ids", torch.arange(8))),
        (P.paddleocr_image_grid_is_host_ints, edit("image_grid_thw", [tuple(np.array([2, 2, 2]))])),
        (P.paddleocr_image_grid_is_host_ints, edit("image_grid_thw", [(1, 2, 2)])),
        (P.paddleocr_image_grid_is_host_ints, edit("pixel_values", out["pixel_values"].float())),
    ]


BREAKS = {"keye-encoder-rope": _keye_encoder_breaks, "keye-vision-split": _keye_split_breaks,
          "keye-process-image": _keye_metadata_breaks, "keye-process-video": _keye_metadata_breaks,
          "paddleocr-encoder": _paddle_encoder_breaks, "paddleocr-encode-image": _paddle_image_breaks}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("side", ["legacy", "optimized"])
def test_every_invariant_holds_on_a_real_output(name, side):
    spec = SPECS[name]()
    out = output(name, spec, side)
    for path in target(name).invariants:
        assert resolve_object(path)(spec, out) is None, path


@pytest.mark.parametrize("name", NAMES)
def test_every_invariant_flags_a_broken_output(name):
    spec = SPECS[name]()
    breaks = BREAKS[name](output(name, spec))
    declared = {path.rpartition(":")[2] for path in target(name).invariants}
    assert {check.__name__ for check, _ in breaks} == declared, "every declared invariant has a breaking input"
    for check, broken in breaks:
        message = check(spec, broken)
        assert message and "\n" not in message, f"{check.__name__} missed it"


def test_invariants_report_a_wrongly_shaped_output_instead_of_raising():
    for name in NAMES:
        spec = SPECS[name]()
        for path in target(name).invariants:
            for junk in (None, [], {"layers": [[]]}, ["x", "y"]):
                message = resolve_object(path)(spec, junk)
                assert message is None or isinstance(message, str), path


def test_wide_inputs_without_a_documented_meaning_are_not_judged():
    # random ids (wide) are not the grids' own: no partition by position
    spec = keye_encoder_spec(position_ids={"kind": "random", "length": 4, "bound": 2, "seed": 1, "dtype": "int64",
                                           "on": "cpu"})
    out = output("keye-encoder-rope", spec)
    cos, sin = calls(out)[0]["rope_emb"]
    out["layers"] = [[{**calls(out)[0], "rope_emb": (cos * 0 + 1, sin * 0)}]] * 2
    assert K.keye_rope_depends_only_on_position(spec, out) is None
    # a cu_seqlens that is not the grids' running sum: the split has no documented meaning
    spec = keye_split_spec(cu_seqlens=[0, 3, 16])
    broken = output("keye-vision-split", spec, "legacy")
    assert K.keye_split_covers_sequence(spec, broken) is None
    assert K.keye_split_sizes_follow_grids(spec, broken) is None
    assert K.KEYE_VISION_SPLIT.expected(spec) is None
    # TORCH_SDPA takes no max_seqlen; an int64 cu_seqlens tensor keeps its dtype
    spec = paddle_encoder_spec(attn_backend="TORCH_SDPA", cu_form="cpu_tensor", cu_dtype="int64")
    out = output("paddleocr-encoder", spec)
    assert P.paddleocr_max_seqlen_is_longest_image(spec, out) is None
    assert P.paddleocr_cu_seqlens_running_sum(spec, out) is None
    assert calls(out)[0]["cu_seqlens"].dtype == torch.int64


# --- the references -------------------------------------------------------------------


REFERENCES = {"keye-encoder-rope": K.KEYE_ENCODER_ROPE, "keye-vision-split": K.KEYE_VISION_SPLIT,
              "keye-process-image": K.KEYE_METADATA, "keye-process-video": K.KEYE_METADATA,
              "paddleocr-encoder": P.PADDLEOCR_ENCODER, "paddleocr-encode-image": P.PADDLEOCR_ENCODE_IMAGE}
REFERENCE_SPECS = [
    ("keye-encoder-rope", keye_encoder_spec()),
    ("keye-encoder-rope", keye_encoder_spec([[3, 4, 2]], heads=2, hidden_size=12, layers=1)),  # head_dim 6
    ("keye-encoder-rope", keye_encoder_spec(position_ids={"kind": "grid", "dtype": "int32", "on": "cpu"})),
    ("keye-vision-split", keye_split_spec()),
    ("keye-vision-split", keye_split_spec([[1, 2, 2], [1, 4, 2], [2, 2, 4]], nesting=[0, [1, 2]], dtype="bfloat16")),
    ("keye-process-image", keye_metadata_spec([[1, 4, 2], [1, 2, 2]])),
    ("keye-process-video", keye_metadata_spec()),
    ("paddleocr-encoder", paddle_encoder_spec()),
    ("paddleocr-encoder", paddle_encoder_spec(([2, 4, 2],), attn_backend="TORCH_SDPA", head_dim=6)),
    ("paddleocr-encode-image", paddle_image_spec()),
]


def differences(reference: Reference, spec: dict, out) -> list:
    return list(compare_values(reference.expected(spec), reference.observed(out), Comparison(floats=reference.floats)))


@pytest.mark.parametrize("name, spec", REFERENCE_SPECS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(REFERENCE_SPECS)])
def test_reference_matches_both_copies(name, spec):
    assert resolve_object(target(name).reference) is REFERENCES[name]
    for side in ("legacy", "optimized"):
        assert differences(REFERENCES[name], spec, output(name, spec, side)) == []


def test_keye_rope_reference_is_siglip_s_definition():
    """Spot values by hand: head_dim 8 -> rotary dim 4 -> inv_freq [1, 1/100];
    a row is [h, h/100, w, w/100] twice, cos'd."""
    expected = K.KEYE_ENCODER_ROPE.expected(keye_encoder_spec())
    cos = expected[0]["cos"]
    assert cos.shape == (16, 8)
    # token 5 is (1, 1) of image 1 (grid 1x2x4): angles [1, .01, 1, .01]
    assert torch.allclose(cos[5], torch.tensor([1, .01, 1, .01] * 2, dtype=torch.float64).cos().float())
    assert K.patch_positions([(2, 1, 2)]) == [(0, 0), (0, 1), (0, 0), (0, 1)]
    assert expected[0]["cu_seqlens"] == [0, 8, 16]


def _broken_for_reference(name: str, out):
    if name == "keye-encoder-rope":
        first = calls(out)[0]
        cos, sin = first["rope_emb"]
        return {**out, "layers": [[{**first, "rope_emb": (cos.flip(0), sin)}]] * 2}
    if name == "keye-vision-split":
        return [out[1], out[0]]
    if name in ("keye-process-image", "keye-process-video"):
        return [{**out[0], "sample_indices": out[0]["sample_indices"] * 0}, out[1]]
    if name == "paddleocr-encoder":
        first = calls(out)[0]
        swapped = first["rotary_pos_emb"][:, [2, 3, 0, 1]]  # (w, h) instead of (h, w)
        return {**out, "layers": [[{**first, "rotary_pos_emb": swapped}]] * 2}
    return {**out, "position_ids": out["position_ids"].flip(0)}


@pytest.mark.parametrize("name", NAMES)
def test_reference_flags_a_broken_output(name):
    spec = SPECS[name]()
    assert differences(REFERENCES[name], spec, _broken_for_reference(name, output(name, spec)))


# --- the real copies over the targets' own specs -----------------------------------------


def _sample(name: str, contract: str):
    subject = target(name)
    config = RunConfig(contract=contract)

    @SAMPLE
    @given(subject.input_model().specs(["cpu"], contract))
    def check(spec):
        result = run_example(subject, spec, config)
        ours = [o for o in result.oracles if o.startswith("invariant") or o == "reference"]
        assert not ours, (ours, [m.detail for m in result.mismatches], spec)
        if contract == "caller":
            assert result.verdict is Verdict.AGREE, (result.verdict, spec)

    check()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("contract", ["caller", "wide"])
def test_real_copies_satisfy_the_oracles_over_their_specs(name, contract):
    _sample(name, contract)


# --- consumers ----------------------------------------------------------------------


CONSUMERS = [(name, resolve_object(target(name).consumer)) for name in NAMES if target(name).consumer]


def test_the_split_alone_has_no_host_reading_consumer():
    assert {name for name, _ in CONSUMERS} == set(NAMES) - {"keye-vision-split"}


@pytest.mark.parametrize("name, consumer", CONSUMERS, ids=[name for name, _ in CONSUMERS])
def test_consumer_reads_without_changing_the_output(name, consumer):
    spec = SPECS[name]()
    out = output(name, spec)
    before = copy.deepcopy(out)
    consumer(spec, out)
    assert list(compare_values(before, out, Comparison(floats="exact"))) == []


def test_paddleocr_consumer_reads_max_seqlen_or_the_lengths_as_the_backend_does(monkeypatch):
    cases = []
    for backend, read in (("FLASH_ATTN", "item"), ("TRITON_ATTN", "item"), ("TORCH_SDPA", "tolist")):
        spec = paddle_encoder_spec(attn_backend=backend)
        cases.append((spec, output("paddleocr-encoder", spec), read))
    reads = []
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append("item") or 0)
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append("tolist") or [])
    for spec, out, read in cases:
        reads.clear()
        P.paddleocr_encoder_layer_reads(spec, out)
        assert reads == [read] * spec["num_layers"], spec["attn_backend"]


@requires_cuda
@pytest.mark.parametrize("name", ["keye-encoder-rope", "paddleocr-encoder"])
def test_consumer_syncs_once_per_layer_on_both_sides(name):
    """The device-resident cu_seqlens / max_seqlen costs the attention one host
    read per layer in 0.27.1 and 0.28.0 alike: the PR left that sync in place."""
    spec = {**SPECS[name](), "device": "cuda"}
    layers = spec.get("layers", spec.get("num_layers"))
    for side in ("legacy", "optimized"):
        result = run_side(target(name), side, spec)
        assert result.consumer_syncs == layers, (side, result.consumer_syncs)


# --- bugs planted in both copies ---------------------------------------------------------


def test_shared_plants_cover_two_families():
    assert {p.base_target for p in SHARED_BUGS} >= {"keye-vision-split", "paddleocr-encoder"}
