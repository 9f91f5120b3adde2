"""The keep-on-cpu and diffusion_gemma oracles (strategies/keep_on_cpu/oracles.py,
strategies/diffusion_gemma/oracles.py): each invariant holds on a real copy's output
and flags a hand-broken one, the references match both copies and flag a
broken output, the consumer makes upstream's reads and no other, the real
copies satisfy every oracle over a sample of their own specs (the fuzz that must
report each bug planted in both copies is tests/e2e/test_oracles.py)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, Callable

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import strategies.diffusion_gemma.oracles as dg
import strategies.keep_on_cpu.inputs as koc_inputs
import strategies.keep_on_cpu.oracles as koc
from fuzz.engine.execute import run_side
from fuzz.oracles.compare import compare_values
from fuzz.targets import CONTRACTS, Comparison, Target, lookup, resolve_object

ULTRAVOX, INTERNS1, PHI4MM, KEYE, STATES, SAMPLER = lookup([
    "keep-on-cpu-ultravox-audio-lens", "keep-on-cpu-interns1-num-patches", "keep-on-cpu-phi4mm-image-sizes",
    "keep-on-cpu-keye-grid-thw", "diffusion-gemma-states", "diffusion-gemma-sampler",
])
FAMILY = (ULTRAVOX, INTERNS1, PHI4MM, KEYE, STATES, SAMPLER)
SIDES = ("legacy", "optimized")


def _output(target: Target, spec: dict, side: str = "optimized") -> Any:
    result = run_side(target, side, spec)
    assert result.ok, result.raised
    return result.value


def _koc_spec(**extra: Any) -> dict:
    return {"device": "cpu", "dtype": "float32", "seed": 3, "field_dtype": "int64",
            "field_on": dict(koc_inputs.CALLER_PLACEMENT), **extra}


def ultravox_spec(audio_lens: list[int], frames: int = 6, **extra: Any) -> dict:
    return _koc_spec(num_mel_bins=2, d_model=4, max_source_positions=4, frames=frames, audio_lens=audio_lens,
                     layers=1, attn_backend="FLASH_ATTN", pad_audio_to_max_context=False, **extra)


def interns1_spec(images: list[int], videos: list[int], *, images_first: bool = False, grid: int = 4) -> dict:
    return _koc_spec(grid=grid, patch=2, image_tiles=images, video_frames=videos, images_first=images_first,
                     image_token_id=7, video_token_id=9, field_form="tensor", token_form="0d")


def phi4mm_spec(images: list[dict], side: int = 2, mask: str = "rectangle") -> dict:
    return _koc_spec(side=side, hidden_size=2, images=images, mask=mask, mask_dtype="float32",
                     field_form="tensor", batch_as="engine")


def _image(rows: int, cols: int, useful: list[int]) -> dict:
    return {"crops": [rows, cols], "useful": useful, "remainder": [0, 0]}


def keye_spec(images: list[list[int]], videos: list[list[int]], images_first: bool = False) -> dict:
    return _koc_spec(patch=1, text_hidden=2, image_grid_thw=images, video_grid_thw=videos, images_first=images_first)


def _dims(**extra: Any) -> dict:
    return {"device": "cpu", "max_num_reqs": 3, "canvas_length": 2, "vocab_size": 5, "hidden_size": 2,
            "stability_threshold": 2, "max_denoising_steps": 3, "seed": 11, **extra}


def states_spec(ops: list[dict]) -> dict:
    return _dims(ops=ops)


def _add(slot: int, req_id: str = "req-0", prompt_len: int = 5) -> dict:
    return {"op": "model_add", "slot": slot, "slot_form": "int", "req_id": req_id, "prompt_len": prompt_len}


def sampler_spec(requests: list[dict], **extra: Any) -> dict:
    spec = _dims(max_num_reqs=4, canvas_length=3, vocab_size=6)
    decode_logits = sum(int(r["logits"]) for r in requests)
    spec.update(requests=requests, num_draft_tokens=decode_logits, tile=1, top_k=[6, 1, 3, 6],
                top_p=[1.0, 0.9, 1.0, 0.5], num_logprobs=[-1] * 4, logits_dtype="float32", cu_dtype="int32",
                idx_dtype="int64", t_min=0.0, t_max=1.0, confidence_threshold=5.0, entropy_bound=1.0)
    spec.update(extra)
    return spec


def _decode(slot: int, logits: int = 3, prompt: int = 4) -> dict:
    return {"slot": slot, "logits": logits, "prompt_len": prompt, "computed": prompt, "chunk": logits}


def _prefill(slot: int, prompt: int, computed: int, chunk: int) -> dict:
    return {"slot": slot, "logits": 0, "prompt_len": prompt, "computed": computed, "chunk": chunk}


def _holds_and_breaks(check: Callable[[dict, Any], str | None], spec: dict, output: Any,
                      breaks: Callable[[Any], Any], needle: str) -> None:
    """``check`` holds on the real output and names ``needle`` on the broken one."""
    assert check(spec, output) is None
    broken = breaks(copy.deepcopy(output))
    message = check(spec, broken)
    assert message and needle in message, message
    assert "\n" not in message


# -- ultravox -----------------------------------------------------------------

def test_ultravox_one_piece_per_chunk():
    spec = ultravox_spec([6, 3])  # seq_len 3; valid frames 3 and 2
    out = _output(ULTRAVOX, spec)
    assert [tuple(p.shape) for p in out] == [(3, 4), (2, 4)]
    _holds_and_breaks(koc.ultravox_one_piece_per_chunk, spec, out, lambda o: o[:1], "1 pieces for 2 items")
    _holds_and_breaks(koc.ultravox_one_piece_per_chunk, spec, out, lambda o: [o[0], o[1][:1]], "(1, 4), want (2, 4)")
    assert "not a list" in koc.ultravox_one_piece_per_chunk(spec, out[0])


def test_ultravox_valid_frames_finite():
    spec = ultravox_spec([6, 3])
    out = _output(ULTRAVOX, spec, "legacy")

    def nan_frame(o: list[torch.Tensor]) -> list[torch.Tensor]:
        o[1][1, 0] = float("nan")
        return o

    _holds_and_breaks(koc.ultravox_valid_frames_finite, spec, out, nan_frame, "chunk 1 (audio_len 3)")
    # Lengths past the padded input (wide, F10): upstream's segments then run past the tokens.
    assert koc.ultravox_valid_frames_finite(ultravox_spec([9, 3]), nan_frame(copy.deepcopy(out))) is None


def test_ultravox_stand_in_layers_make_the_attention_s_reads_as_the_consumer_s(monkeypatch):
    """The 0.28.0 stand-in layer reads the metadata as the real attention does, per
    backend -- .item() of max_seqlen on the flash path, .tolist() of the segment
    lengths on the SDPA path -- inside consumer_reads(), so the syncs are the consumer's."""
    from fuzz.oracles import syncs
    from strategies.keep_on_cpu.inputs import VarlenWhisperLayer

    reads: list[tuple[str, bool]] = []
    item, tolist = torch.Tensor.item, torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "item",
                        lambda self: reads.append(("item", syncs.in_consumer_reads())) or item(self))
    monkeypatch.setattr(torch.Tensor, "tolist",
                        lambda self: reads.append(("tolist", syncs.in_consumer_reads())) or tolist(self))
    cu = torch.tensor([0, 3, 6], dtype=torch.int32)
    hidden = torch.zeros(6, 4)
    for backend in ("FLASH_ATTN", "TORCH_SDPA"):
        layer = VarlenWhisperLayer(SimpleNamespace(name=backend))
        layer(hidden, cu_seqlens=cu, max_seqlen=torch.tensor(3, dtype=torch.int32))
    assert reads[:2] == [("item", True), ("tolist", True)]
    assert ULTRAVOX.consumer == "strategies.keep_on_cpu.oracles:ultravox_attention_reads"


# -- interns1 -----------------------------------------------------------------

def test_interns1_one_piece_per_item():
    spec = interns1_spec([2, 1], [3], images_first=False)  # grid 4: 4 tokens per tile
    out = _output(INTERNS1, spec)
    assert [tuple(p.shape) for p in out["embeddings"]] == [(12, 12), (8, 12), (4, 12)]

    def swap_modalities(o: dict) -> dict:
        e = o["embeddings"]
        o["embeddings"] = (e[1], e[2], e[0])
        return o

    _holds_and_breaks(koc.interns1_one_piece_per_item, spec, out, swap_modalities, "embeddings[0] has shape (8, 12)")


def test_interns1_context_token_ids():
    spec = interns1_spec([1], [])
    out = _output(INTERNS1, spec)
    assert (out["img_context_token_id"], out["video_context_token_id"]) == (7, None)
    _holds_and_breaks(koc.interns1_context_token_ids, spec, out,
                      lambda o: {**o, "video_context_token_id": 7}, "video_context_token_id is 7")
    _holds_and_breaks(koc.interns1_context_token_ids, spec, out,
                      lambda o: {**o, "img_context_token_id": torch.tensor(7)}, "want 7 from image_token_id")


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(("images", "videos", "images_first", "grid"),
                         [([2, 1], [3], False, 4), ([1], [], True, 2), ([], [2, 2], True, 2)])
def test_interns1_reference_matches_the_copies(side, images, videos, images_first, grid):
    spec = interns1_spec(images, videos, images_first=images_first, grid=grid)
    out = _output(INTERNS1, spec, side)
    ref = koc.INTERNS1_REFERENCE
    assert not list(compare_values(ref.expected(spec), ref.observed(out), Comparison(floats=ref.floats)))


def test_interns1_reference_flags_a_swapped_item():
    spec = interns1_spec([1, 1], [], images_first=True, grid=2)
    out = _output(INTERNS1, spec)
    out["embeddings"] = out["embeddings"][::-1]  # same shapes: only values tell
    ref = koc.INTERNS1_REFERENCE
    assert list(compare_values(ref.expected(spec), ref.observed(out), Comparison(floats=ref.floats)))


# -- phi4mm -------------------------------------------------------------------

def test_phi4mm_one_embedding_per_image():
    spec = phi4mm_spec([_image(1, 2, [2, 3]), _image(2, 1, [3, 1])])
    out = _output(PHI4MM, spec)
    _holds_and_breaks(koc.phi4mm_one_embedding_per_image, spec, out, lambda o: o[:1], "1 embeddings for 2 images")
    _holds_and_breaks(koc.phi4mm_one_embedding_per_image, spec, out,
                      lambda o: [o[0], o[1][:, :1]], "want (tokens, 2)")


def test_phi4mm_tokens_follow_crops():
    # side 2 -> G = 1 token per compressed crop: uh * (uw + 1) + 1 + 1 * 2.
    spec = phi4mm_spec([_image(1, 2, [2, 3]), _image(2, 1, [3, 1])])
    out = _output(PHI4MM, spec)
    assert [p.shape[0] for p in out] == [1 * (2 + 1) + 3, 2 * (1 + 1) + 3]
    _holds_and_breaks(koc.phi4mm_tokens_follow_crops, spec, out, lambda o: [o[0], o[1][:-1]],
                      "image 1 (2x1 crops of 2x2 patches, useful [3, 1]): 6 tokens, want 7")
    # A random mask (wide) has no useful rectangle to count.
    assert koc.phi4mm_tokens_follow_crops(phi4mm_spec(spec["images"], mask="random"), out[:1]) is None


def test_phi4mm_token_count_on_a_larger_crop():
    spec = phi4mm_spec([_image(2, 2, [5, 7])], side=4)  # G 2: rows 0,2,4 / cols 0,2,4,6 of the mask survive
    (embedding,) = _output(PHI4MM, spec)
    assert embedding.shape[0] == 3 * (4 + 1) + 1 + 2 * 3
    assert koc.phi4mm_tokens_follow_crops(spec, [embedding]) is None


# -- keye ---------------------------------------------------------------------

def test_keye_embeddings_follow_grid():
    spec = keye_spec([[1, 2, 4]], [[2, 2, 2], [1, 4, 2]])
    out = _output(KEYE, spec)
    assert [tuple(e.shape) for e in out["embeddings"]] == [(2, 2), (2, 2), (2, 2)]

    def drop_video(o: dict) -> dict:
        o["embeddings"] = o["embeddings"][1:]
        return o

    _holds_and_breaks(koc.keye_embeddings_follow_grid, spec, out, drop_video, "2 pieces for 3 items")
    assert koc.keye_embeddings_follow_grid(keye_spec([], []), {"embeddings": None, "visual_calls": []}) is None


def test_keye_tower_cu_seqlens():
    spec = keye_spec([[1, 2, 4], [1, 2, 2]], [[2, 2, 2]], images_first=True)
    out = _output(KEYE, spec, "legacy")
    assert [c["cu_seqlens"].tolist() for c in out["visual_calls"]] == [[0, 8, 12], [0, 8]]

    def off_by_one(o: dict) -> dict:
        o["visual_calls"][0]["cu_seqlens"] = torch.tensor([0, 8, 13], dtype=torch.int32)
        return o

    _holds_and_breaks(koc.keye_tower_cu_seqlens, spec, out, off_by_one, "want [0, 8, 12] (int32)")
    _holds_and_breaks(koc.keye_tower_cu_seqlens, spec, out, lambda o: {**o, "visual_calls": o["visual_calls"][::-1]},
                      "image call: cu_seqlens [0, 8]")

    def int64(o: dict) -> dict:
        o["visual_calls"][1]["cu_seqlens"] = o["visual_calls"][1]["cu_seqlens"].long()
        return o

    _holds_and_breaks(koc.keye_tower_cu_seqlens, spec, out, int64, "torch.int64")


def test_keye_tower_position_ids():
    spec = keye_spec([], [[2, 2, 2]])
    out = _output(KEYE, spec)
    (call,) = out["visual_calls"]
    assert call["position_ids"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]

    def per_row(o: dict) -> dict:
        o["visual_calls"][0]["position_ids"] = torch.arange(8) % 2
        return o

    _holds_and_breaks(koc.keye_tower_position_ids, spec, out, per_row, "position_ids differs")

    def one_sample(o: dict) -> dict:
        o["visual_calls"][0]["sample_indices"] = torch.ones(8, dtype=torch.int64)
        return o

    _holds_and_breaks(koc.keye_tower_position_ids, spec, out, one_sample, "sample_indices differs")


def test_keye_consumer_reads_max_seqlen_once_per_tower_call(monkeypatch):
    spec = keye_spec([[1, 2, 4]], [[2, 2, 2]])
    out = _output(KEYE, spec)
    before = copy.deepcopy(out)
    reads: list[Any] = []
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append(item(self)) or item(self))
    resolve_object(KEYE.consumer)(spec, out)
    assert reads == [8, 8]  # each call's longest item: image 1*2*4, video 2*2*2
    assert not list(compare_values(before, out, Comparison(floats="exact")))  # the output is left alone


# -- diffusion-gemma-states ---------------------------------------------------

OPS = [_add(1, "req-0", 7), {"op": "init_canvas", "slots": [2], "form": "device_tensor", "dtype": "int64"},
       {"op": "states_remove", "slot": 0, "slot_form": "int"}, _add(2, "_warmup_0", 3),
       {"op": "model_remove", "req_id": "req-1"}]


def test_states_slot_stores_follow_operations():
    spec = states_spec(OPS)
    out = _output(STATES, spec)
    start = dg.seeded_state(spec, spec["seed"])
    state = out["state"]
    assert state["prompt_len"].tolist() == [start["prompt_len"][0], 7, start["prompt_len"][2]]
    assert state["is_encoder_phase"].tolist() == [False, True, True]

    def untouched_slot_changed(o: dict) -> dict:
        o["state"]["step"][0] += 1  # slot 0 was only removed: its step stays
        return o

    def add_forgot_history(o: dict) -> dict:
        o["state"]["accepted_canvas_history_len"][1] = 3
        return o

    check = dg.states_slot_stores_follow_operations
    _holds_and_breaks(check, spec, out, untouched_slot_changed, "slot 0: step")
    _holds_and_breaks(check, spec, out, add_forgot_history,
                      "slot 1: accepted_canvas_history_len is 3, want 0 (last written by op #0 model_add(1, 'req-0'))")
    # After an exception the state is not specified: nothing to check.
    raised = {**add_forgot_history(copy.deepcopy(out)), "errors": [None, None, "IndexError", None, None]}
    assert check(spec, raised) is None


def test_states_reinitialized_canvas_is_tokens():
    spec = states_spec(OPS)
    out = _output(STATES, spec, "legacy")

    def out_of_vocab(o: dict) -> dict:
        o["state"]["canvas"][2, 0] = 5
        return o

    _holds_and_breaks(dg.states_reinitialized_canvas_is_tokens, spec, out, out_of_vocab, "outside [0, 5)")


def test_states_req_map_follows_adds_and_removes():
    spec = states_spec([*OPS, {"op": "model_remove", "req_id": "req-0"}])
    out = _output(STATES, spec)
    assert out["req_id_to_index"] == {"_warmup_0": 2}
    _holds_and_breaks(dg.states_req_map_follows_adds_and_removes, spec, out,
                      lambda o: {**o, "req_id_to_index": {"_warmup_0": 2, "req-0": 1}}, "want {'_warmup_0': 2}")


def test_states_caller_operations_succeed():
    spec = states_spec(OPS)
    out = _output(STATES, spec)
    _holds_and_breaks(dg.states_caller_operations_succeed, spec, out,
                      lambda o: {**o, "errors": [None, "RuntimeError", None, None, None]}, "op #1")
    # An out-of-range slot (wide) may raise.
    wide = states_spec([{"op": "states_add", "slot": 3, "slot_form": "int"}])
    assert dg.states_caller_operations_succeed(wide, {"errors": ["IndexError"]}) is None
    # ... and so may what follows it: the map then names a slot that does not exist.
    after = states_spec([_add(3), {"op": "model_remove", "req_id": "req-0"}])
    assert dg.states_caller_operations_succeed(after, {"errors": ["IndexError", "IndexError"]}) is None


# -- diffusion-gemma-sampler --------------------------------------------------

BATCH = [_decode(2, 3), _prefill(0, 5, 2, 3), _decode(3, 2), _prefill(1, 6, 0, 2)]


def test_sampler_expansion_repeats_each_request():
    spec = sampler_spec(BATCH)
    out = _output(SAMPLER, spec)
    (call,) = out["top_k_top_p_calls"]
    assert call["expanded_idx_mapping"].tolist() == [2, 2, 2, 3, 3]

    def positions(o: dict) -> dict:
        o["top_k_top_p_calls"][0]["expanded_idx_mapping"] = torch.tensor([0, 0, 0, 1, 1])
        return o

    def one_short(o: dict) -> dict:
        o["top_k_top_p_calls"][0]["expanded_idx_mapping"] = torch.tensor([2, 2, 3, 3])
        return o

    check = dg.sampler_expansion_repeats_each_request
    _holds_and_breaks(check, spec, out, positions, "first difference at token 0")
    _holds_and_breaks(check, spec, out, one_short, "4 entries for 5 decode logits")
    prefill = sampler_spec([_prefill(0, 5, 2, 3)], num_draft_tokens=0)
    assert check(prefill, _output(SAMPLER, prefill)) is None
    assert "1 get_top_k_top_p calls with no decode" in check(prefill, out)


def test_sampler_outputs_follow_the_batch():
    spec = sampler_spec(BATCH)
    out = _output(SAMPLER, spec)

    def partial_commit(o: dict) -> dict:
        o["num_sampled"][0] = 1
        return o

    def narrow(o: dict) -> dict:
        o["sampled_token_ids"] = o["sampled_token_ids"][:, :1]
        return o

    check = dg.sampler_outputs_follow_the_batch
    _holds_and_breaks(check, spec, out, partial_commit, "num_sampled 1, want one of [0, 3]")
    _holds_and_breaks(check, spec, out, narrow, "want (4, 3)")
    committing = {**out, "num_sampled": torch.tensor([3, 0, 2, 0], dtype=torch.int32),
                  "sampled_token_ids": torch.tensor([[1, 2, 6], [0, 0, 0], [0, 1, 0], [0, 0, 0]])}
    assert "sampled ids [6] outside [0, 6)" in check(spec, committing)


def test_sampler_draft_tokens_mirror_canvas():
    spec = sampler_spec(BATCH)
    out = _output(SAMPLER, spec)

    def stale(o: dict) -> dict:
        o["draft_tokens"][1, 0] = (o["state"]["canvas"][1, 0] + 1) % 6
        return o

    _holds_and_breaks(dg.sampler_draft_tokens_mirror_canvas, spec, out, stale, "slot 1: draft_tokens")


def test_sampler_finished_prefills_enter_denoising():
    spec = sampler_spec(BATCH)  # slot 0 finishes its prompt (2 + 3 >= 5), slot 1 does not (0 + 2 < 6)
    out = _output(SAMPLER, spec)
    start = dg.seeded_state(spec, spec["seed"])["is_encoder_phase"]

    def not_flipped(o: dict) -> dict:
        o["state"]["is_encoder_phase"][0] = True
        return o

    def flipped_early(o: dict) -> dict:
        o["state"]["is_encoder_phase"][1] = not bool(start[1])
        return o

    check = dg.sampler_finished_prefills_enter_denoising
    _holds_and_breaks(check, spec, out, not_flipped, "slot 0 (finished prefill")
    _holds_and_breaks(check, spec, out, flipped_early, "slot 1 (unfinished prefill")


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("requests", [BATCH, [_decode(0, 3), _decode(1, 1)], [_decode(3, 2, prompt=1)]])
def test_sampler_reference_matches_the_copies(side, requests):
    spec = sampler_spec(requests)
    out = _output(SAMPLER, spec, side)
    ref = dg.SAMPLER_REFERENCE
    expected = ref.expected(spec)
    assert not list(compare_values(expected, ref.observed(out), Comparison(floats=ref.floats)))


def test_sampler_reference_commits_the_stored_argmax():
    spec = sampler_spec(BATCH)
    start = dg.seeded_state(spec, spec["seed"])
    expected = dg.sampler_expected(spec)
    for request, count, tokens in zip(BATCH, expected["num_sampled"], expected["committed"]):
        if request["logits"] and start["is_encoder_phase"][request["slot"]]:
            assert count == request["logits"] and tokens == start["argmax_canvas"][request["slot"]][:count].tolist()
        else:
            assert count == 0 and tokens == []
    out = _output(SAMPLER, spec)
    out["num_rejected"] = out["num_rejected"] + 1
    assert list(compare_values(expected, dg.SAMPLER_REFERENCE.observed(out), Comparison(floats="exact")))
    half = sampler_spec([{**_decode(0, 3), "logits": 2.5}], cu_dtype="float64")
    assert dg.sampler_expected(half) is None  # wide half counts: no documented meaning


# -- the real copies satisfy every oracle over their own specs ----------------

def _oracles_hold(target: Target, spec: dict) -> None:
    reference = resolve_object(target.reference) if target.reference else None
    expected = reference.expected(spec) if reference else None
    for side in SIDES:
        result = run_side(target, side, spec)
        if not result.ok:
            continue
        for path in target.invariants:
            assert resolve_object(path)(spec, result.value) is None, (path, side, spec)
        if expected is not None:
            observed = reference.observed(result.value)
            assert not list(compare_values(expected, observed, Comparison(floats=reference.floats))), (side, spec)


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("target", FAMILY, ids=lambda t: t.name)
def test_real_copies_satisfy_every_oracle(target, contract):
    @given(target.input_model().specs(("cpu",), contract))
    @settings(max_examples=12, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    def check(spec: dict) -> None:
        _oracles_hold(target, spec)

    check()


def test_every_target_of_the_family_declares_its_oracles():
    for target in FAMILY:
        assert target.invariants and not target.no_invariants, target.name
        for path in target.invariants:
            assert path.startswith(("strategies.keep_on_cpu.oracles:", "strategies.diffusion_gemma.oracles:")), path
    assert (INTERNS1.reference, SAMPLER.reference) == ("strategies.keep_on_cpu.oracles:INTERNS1_REFERENCE",
                                                       "strategies.diffusion_gemma.oracles:SAMPLER_REFERENCE")
    assert KEYE.consumer == "strategies.keep_on_cpu.oracles:keye_attention_reads"
