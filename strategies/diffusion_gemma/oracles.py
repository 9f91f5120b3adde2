"""Oracles of the diffusion_gemma targets (strategies/diffusion_gemma/record.py).

Outputs, as strategies/diffusion_gemma/inputs.py's thunks return them:

* diffusion-gemma-states: ``{"state": every DiffusionGemmaRequestStates tensor
  after the spec's operations, "req_id_to_index": the model state's map,
  "errors": the exception type name (or None) of each operation}``;
* diffusion-gemma-sampler: ``{"sampled_token_ids", "num_sampled", "num_rejected",
  "logprobs", "top_k_top_p_calls": what SamplingStates.get_top_k_top_p received,
  "state", "draft_tokens", "pending_logprobs"}`` after one ``DiffusionSampler.__call__``.

Both input models start each side from the same seeded state
(``strategies.diffusion_gemma.inputs.state_payload(states, seed)``, a live server's
values); the oracles rebuild that starting state from the spec to know what an
untouched slot must still hold.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from fuzz.api import Reference, per_spec
from strategies.diffusion_gemma.inputs import STATE_TENSORS, state_payload

INT32_MAX = 2**31 - 1
# Slot forms that index one slot like an int (basic indexing: a view that fill_ writes
# through). "list" and "cpu_tensor1" index by advanced indexing (a copy): F6.
INT_LIKE_FORMS = ("int", "numpy_int32", "numpy_int64", "cpu_scalar", "device_scalar")


# --------------------------------------------------------------------------
# The starting state
# --------------------------------------------------------------------------


def _state_shapes(spec: dict) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype of each state tensor, as upstream
    ``DiffusionGemmaRequestStates.__init__`` allocates them."""
    n, cl, st, hidden = spec["max_num_reqs"], spec["canvas_length"], spec["stability_threshold"], spec["hidden_size"]
    return {
        "is_encoder_phase": ((n,), torch.bool),
        "canvas": ((n, cl), torch.int64),
        "step": ((n,), torch.int32),
        "accepted_canvas_history": ((n, st, cl), torch.int64),
        "accepted_canvas_history_len": ((n,), torch.int32),
        "argmax_canvas": ((n, cl), torch.int64),
        "prompt_len": ((n,), torch.int32),
        "confident": ((n,), torch.bool),
        "self_conditioning_embeds": ((n, cl, hidden), torch.float32),
    }


def seeded_state(spec: dict, seed: int) -> dict[str, torch.Tensor]:
    """The CPU values the input model stores into every state tensor for ``seed``
    (the starting state, or a ``scribble`` step's)."""
    shapes = _state_shapes(spec)
    holder = SimpleNamespace(
        vocab_size=spec["vocab_size"], max_denoising_steps=spec["max_denoising_steps"],
        stability_threshold=spec["stability_threshold"], device="cpu",
        **{name: torch.zeros(shape, dtype=dtype) for name, (shape, dtype) in shapes.items()},
    )
    return {name: value.clone() for name, value in state_payload(holder, seed).items()}


def _state_of(output: Any) -> tuple[dict[str, torch.Tensor] | None, str | None]:
    if not isinstance(output, dict) or not isinstance(output.get("state"), dict):
        return None, f"output is a {type(output).__name__} without a 'state' dict"
    state = output["state"]
    missing = [name for name in STATE_TENSORS if not isinstance(state.get(name), torch.Tensor)]
    if missing:
        return None, f"state lacks tensors {missing}"
    return {name: state[name].detach().cpu() for name in STATE_TENSORS}, None


# --------------------------------------------------------------------------
# diffusion-gemma-states: a replay of the operations in plain Python
# --------------------------------------------------------------------------


class _Replay:
    """What the state must hold after the operations, slot by slot, from the
    upstream meaning of each one:

    * ``DiffusionGemmaRequestStates.add_request(slot)``: the slot enters the
      encoder phase (``is_encoder_phase`` True), gets a fresh random canvas
      (``init_canvas``), ``step`` 0, history length 0 and a zero
      self-conditioning embedding; nothing else changes.
    * ``remove_request(slot)``: ``is_encoder_phase`` False, history length 0,
      self-conditioning embedding 0; nothing else changes.
    * ``DiffusionGemmaModelState.add_request(req_index, data)``: maps
      ``req_id -> req_index``, adds the slot, and stores ``len(prompt_token_ids)``
      as its ``prompt_len`` unless the request is a ``_warmup_`` one.
    * ``DiffusionGemmaModelState.remove_request(req_id)``: pops the map and
      removes that slot, if the request was known.
    * ``init_canvas(slots)``: "Initialize canvas with random tokens for the
      given slots" -- those rows only.
    * ``scribble`` (the harness): every tensor overwritten with seeded values.

    ``known`` holds every value that is determined; ``fresh`` the canvas rows
    drawn at random since; ``unknown_prompt`` the slots whose prompt length does
    not fit the int32 store (nothing upstream says about those). ``valid`` turns
    False for an operation the documented meaning does not cover (a list or
    1-D tensor slot: F6 in known-issues.json)."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.n = spec["max_num_reqs"]
        self.known = seeded_state(spec, spec["seed"])
        self.fresh: set[int] = set()
        self.unknown_prompt: set[int] = set()
        self.req_map: dict[str, int] = {}
        self.last_op = ["the starting state"] * self.n
        self.valid = True

    def _slot(self, op: dict) -> int | None:
        slot, form = op["slot"], op["slot_form"]
        if form not in INT_LIKE_FORMS or not -self.n <= slot < self.n:
            self.valid = False
            return None
        return slot % self.n

    def _add(self, slot: int, label: str) -> None:
        self.known["is_encoder_phase"][slot] = True
        self.fresh.add(slot)
        self.known["step"][slot] = 0
        self.known["accepted_canvas_history_len"][slot] = 0
        self.known["self_conditioning_embeds"][slot] = 0
        self.last_op[slot] = label

    def _remove(self, slot: int, label: str) -> None:
        self.known["is_encoder_phase"][slot] = False
        self.known["accepted_canvas_history_len"][slot] = 0
        self.known["self_conditioning_embeds"][slot] = 0
        self.last_op[slot] = label

    def apply(self, step: int, op: dict) -> None:
        kind = op["op"]
        label = f"op #{step} {kind}"
        if kind == "scribble":
            self.known = seeded_state(self.spec, self.spec["seed"] + 1000 * (step + 1))
            self.fresh.clear()
            self.unknown_prompt.clear()
            self.last_op = [label] * self.n
        elif kind == "model_remove":
            slot = self.req_map.pop(op["req_id"], None)
            if slot is not None:
                self._remove(slot % self.n, f"{label}({op['req_id']!r})")
        elif kind == "init_canvas":
            for slot in op["slots"]:
                self.fresh.add(slot % self.n)
                self.last_op[slot % self.n] = label
        else:
            slot = self._slot(op)
            if slot is None:
                return
            if kind == "states_remove":
                self._remove(slot, f"{label}({op['slot']})")
            elif kind == "states_add":
                self._add(slot, f"{label}({op['slot']})")
            elif kind == "model_add":
                self.req_map[op["req_id"]] = op["slot"]
                self._add(slot, f"{label}({op['slot']}, {op['req_id']!r})")
                if not op["req_id"].startswith("_warmup_"):
                    if op["prompt_len"] > INT32_MAX:
                        self.unknown_prompt.add(slot)
                    else:
                        self.known["prompt_len"][slot] = op["prompt_len"]
                        self.unknown_prompt.discard(slot)


def _replay(spec: dict, output: Any) -> _Replay | None:
    """The replay of the spec, or None where it says nothing about the output:
    an operation raised (the state after an exception is not specified) or was
    outside the documented meaning."""
    errors = output.get("errors") if isinstance(output, dict) else None
    if not isinstance(errors, list) or any(e is not None for e in errors):
        return None
    replay = _replayed(spec)
    return replay if replay.valid else None


@per_spec  # three invariants, on both sides, read the same replay (read-only)
def _replayed(spec: dict) -> _Replay:
    replay = _Replay(spec)
    for step, op in enumerate(spec["ops"]):
        replay.apply(step, op)
    return replay


def _row(tensor: torch.Tensor, slot: int) -> Any:
    value = tensor[slot]
    return value.tolist() if value.dim() else value.item()


def states_slot_stores_follow_operations(spec: dict, output: Any) -> str | None:
    """Every slot holds what its last operation stored, and a slot no operation
    touched still holds its starting value (add_request / remove_request /
    init_canvas write their slot only).

    See ``_Replay`` for each operation's meaning (upstream
    ``DiffusionGemmaRequestStates``/``DiffusionGemmaModelState``); canvas rows
    drawn at random are checked by ``states_reinitialized_canvas_is_tokens``."""
    state, message = _state_of(output)
    if message:
        return message
    replay = _replay(spec, output)
    if replay is None:
        return None
    for name in STATE_TENSORS:
        want, got = replay.known[name], state[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"{name} is {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}"
        for slot in range(replay.n):
            if name == "canvas" and slot in replay.fresh:
                continue
            if name == "prompt_len" and slot in replay.unknown_prompt:
                continue
            if not torch.equal(got[slot], want[slot]):
                return (f"slot {slot}: {name} is {_row(got, slot)}, want {_row(want, slot)} "
                        f"(last written by {replay.last_op[slot]})")
    return None


def states_reinitialized_canvas_is_tokens(spec: dict, output: Any) -> str | None:
    """A canvas row re-initialized by ``add_request`` / ``init_canvas`` holds
    token ids of the vocabulary, ``0 <= id < vocab_size``.

    ``init_canvas``: ``torch.randint(0, self.vocab_size, (n, self.canvas_length))``
    "Initialize canvas with random tokens for the given slots"."""
    state, message = _state_of(output)
    if message:
        return message
    replay = _replay(spec, output)
    if replay is None:
        return None
    canvas, vocab = state["canvas"], spec["vocab_size"]
    for slot in sorted(replay.fresh):
        row = canvas[slot].tolist()
        if any(not 0 <= token < vocab for token in row):
            return f"slot {slot}: canvas {row} after {replay.last_op[slot]} has ids outside [0, {vocab})"
    return None


def states_req_map_follows_adds_and_removes(spec: dict, output: Any) -> str | None:
    """``_req_id_to_index`` maps exactly the requests added and not removed since,
    each to the ``req_index`` it was last added at.

    ``DiffusionGemmaModelState.add_request``: ``self._req_id_to_index[new_req_data.req_id] = req_index``;
    ``remove_request``: ``self._req_id_to_index.pop(req_id, None)``."""
    if not isinstance(output, dict) or not isinstance(output.get("req_id_to_index"), dict):
        return f"output is a {type(output).__name__} without a 'req_id_to_index' dict"
    replay = _replay(spec, output)
    if replay is None:
        return None
    got = {key: int(value) for key, value in output["req_id_to_index"].items()}
    if got != replay.req_map:
        return f"req_id_to_index is {got}, want {replay.req_map}"
    return None


def _caller_like(op: dict, n: int) -> bool:
    """An operation as today's callers make it (the caller contract's forms)."""
    kind = op["op"]
    if kind in ("model_add", "states_add", "states_remove"):
        ok = op["slot_form"] == "int" and 0 <= op["slot"] < n
        return ok and (kind != "model_add" or 1 <= op["prompt_len"] <= INT32_MAX)
    if kind == "init_canvas":
        slots = op["slots"]
        return (op["form"] == "device_tensor" and op["dtype"] == "int64" and bool(slots)
                and all(0 <= s < n for s in slots) and len(set(slots)) == len(slots))
    return True


def states_caller_operations_succeed(spec: dict, output: Any) -> str | None:
    """No operation made the way today's callers make it raises.

    The runner calls ``add_request(req_index, new_req_data)`` with a Python int
    slot in ``[0, max_num_reqs)`` and ``remove_request(req_id)`` for any id;
    ``init_canvas`` gets distinct device int64 slots (``add_request``,
    ``_finish_prefills``). Operations in the wide contract's other forms may
    raise (out-of-range slots: IndexError), and so may every operation after
    one: the request map can then name a slot that does not exist (upstream's
    ``add_request`` maps the request before storing into the slot)."""
    errors = output.get("errors") if isinstance(output, dict) else None
    if not isinstance(errors, list) or len(errors) != len(spec["ops"]):
        return f"errors is {errors!r}, want one entry per operation ({len(spec['ops'])})"
    n = spec["max_num_reqs"]
    for step, (op, error) in enumerate(zip(spec["ops"], errors)):
        if not _caller_like(op, n):
            return None
        if error is not None:
            return f"op #{step} {op} raised {error}"
    return None


# --------------------------------------------------------------------------
# diffusion-gemma-sampler
# --------------------------------------------------------------------------


def _whole_counts(spec: dict) -> bool:
    """Every request's logit count is a whole number: the wide contract's half
    counts (float64 ``cu_num_logits_np``) make the host and device copies of the
    counts disagree, and nothing upstream says what that means."""
    return all(float(r["logits"]).is_integer() for r in spec["requests"])


def _decode_path(spec: dict) -> bool:
    """``DiffusionSampler.__call__``: ``if input_batch.num_draft_tokens == 0:
    return self._handle_prefill(...)``; otherwise the decode (denoise/commit) path."""
    return spec["num_draft_tokens"] != 0


def _decode_requests(spec: dict) -> list[dict]:
    """The requests with logits (``per_req_nlogits_np > 0``), in batch order."""
    return [r for r in spec["requests"] if r["logits"] > 0]


def _finished_prefill(request: dict) -> bool:
    """``_finish_prefills``: ``num_computed_prefill_tokens + num_scheduled_tokens >= prefill_len``."""
    return request["computed"] + request["chunk"] >= request["prompt_len"]


def _sampler_fields(output: Any, *keys: str) -> str | None:
    if not isinstance(output, dict):
        return f"sampler output is a {type(output).__name__}, not a dict"
    missing = [k for k in keys if k not in output]
    return f"sampler output lacks {missing}" if missing else None


def sampler_expansion_repeats_each_request(spec: dict, output: Any) -> str | None:
    """The per-token slot mapping handed to ``get_top_k_top_p`` repeats each decode
    request's slot exactly its number of logits, in batch order (length: the
    total decode logits), with the decode slots as ``idx_mapping_np``; no call
    when no request decodes.

    ``__call__``: "Per-request top_k/top_p, mirroring the AR sampler":
    ``decode_slots.repeat_interleave(valid_canvas_len, ...)``, so that
    ``top_k = top_k.gpu[expanded_idx_mapping]`` gives every logit row its own
    request's top-k/top-p before ``apply_top_k_top_p(logits, top_k, top_p)``."""
    if not _whole_counts(spec):
        return None
    message = _sampler_fields(output, "top_k_top_p_calls")
    if message:
        return message
    calls = output["top_k_top_p_calls"]
    decode = _decode_requests(spec) if _decode_path(spec) else []
    if not decode:
        return None if not calls else f"{len(calls)} get_top_k_top_p calls with no decode request"
    if len(calls) != 1:
        return f"{len(calls)} get_top_k_top_p calls for one decode batch"
    want = [r["slot"] for r in decode for _ in range(int(r["logits"]))]
    got = calls[0]["expanded_idx_mapping"].tolist()
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        return (f"expanded_idx_mapping has {len(got)} entries for {len(want)} decode logits, first difference at "
                f"token {first}: {got[first:first + 4]} vs {want[first:first + 4]} "
                f"(slots x logits {[(r['slot'], int(r['logits'])) for r in decode]})")
    slots = [int(s) for s in calls[0]["idx_mapping_np"].tolist()]
    if slots != [r["slot"] for r in decode]:
        return f"idx_mapping_np {slots}, want the decode slots {[r['slot'] for r in decode]}"
    return None


def sampler_outputs_follow_the_batch(spec: dict, output: Any) -> str | None:
    """One ``sampled_token_ids`` row per request (``canvas_length`` wide on the
    decode path, 1 on the prefill path), one ``num_sampled`` per request, each 0
    or that request's whole logit count (0 for a prefill), and every sampled id
    within the vocabulary.

    ``_compiled_sample_step``: "Sampled output: commit → emit argmax_canvas,
    denoise → 0" and "Commit only the real canvas length"; ``_handle_prefill``
    returns ``self._sampled[:num_reqs, :1]`` zeroed."""
    if not _whole_counts(spec):
        return None
    message = _sampler_fields(output, "sampled_token_ids", "num_sampled")
    if message:
        return message
    requests, decode_path = spec["requests"], _decode_path(spec)
    sampled, num_sampled = output["sampled_token_ids"], output["num_sampled"]
    width = spec["canvas_length"] if decode_path else 1
    if tuple(sampled.shape) != (len(requests), width):
        return f"sampled_token_ids is {tuple(sampled.shape)}, want ({len(requests)}, {width})"
    counts = num_sampled.tolist()
    if len(counts) != len(requests):
        return f"num_sampled has {len(counts)} entries for {len(requests)} requests"
    for i, (request, count) in enumerate(zip(requests, counts)):
        allowed = {0, int(request["logits"])} if decode_path else {0}
        if count not in allowed:
            return f"request {i} (slot {request['slot']}, {request['logits']} logits): num_sampled {count}, " \
                   f"want one of {sorted(allowed)}"
    vocab = spec["vocab_size"]
    for i, (row, count) in enumerate(zip(sampled.tolist(), counts)):
        bad = [t for t in row[:count] if not 0 <= t < vocab]
        if bad:
            return f"request {i}: sampled ids {bad} outside [0, {vocab})"
    return None


def sampler_draft_tokens_mirror_canvas(spec: dict, output: Any) -> str | None:
    """After a step the draft tokens of every slot of the batch are its canvas
    (decode path with decode requests), and of every finished prefill in any case.

    ``_compiled_sample_step`` Phase 7: "Copy canvas → draft_tokens for all slots"
    (``draft_tokens[all_slots, :CL] = canvas[all_slots]``); ``_finish_prefills``
    "Initializes their canvas, seeds draft tokens" from it -- the next step's
    input ids are the canvas."""
    if not _whole_counts(spec):
        return None
    message = _sampler_fields(output, "draft_tokens")
    if message:
        return message
    state, message = _state_of(output)
    if message:
        return message
    cl, draft = spec["canvas_length"], output["draft_tokens"].detach().cpu()
    every = _decode_path(spec) and bool(_decode_requests(spec))
    for request in spec["requests"]:
        slot = request["slot"]
        prefill = not _decode_path(spec) or request["logits"] == 0
        if not (every or (prefill and _finished_prefill(request))):
            continue
        if draft[slot, :cl].tolist() != state["canvas"][slot].tolist():
            return (f"slot {slot}: draft_tokens[:{cl}] {draft[slot, :cl].tolist()} != canvas "
                    f"{state['canvas'][slot].tolist()}")
    return None


def sampler_finished_prefills_enter_denoising(spec: dict, output: Any) -> str | None:
    """A prefill whose prompt completes this step leaves the encoder phase; one
    that stops short keeps its phase.

    ``_finish_prefills``: "Transition requests whose prompt completes this step
    to denoising ... flips is_encoder_phase to False. Mid-chunk requests (prompt
    longer than the token budget) are left untouched so is_encoder_phase stays
    True"; on the prefill path every request of the batch is a prefill."""
    message = _sampler_fields(output, "state")
    if message:
        return message
    state, message = _state_of(output)
    if message:
        return message
    start = seeded_state(spec, spec["seed"])["is_encoder_phase"]
    phase = state["is_encoder_phase"]
    for request in spec["requests"]:
        if _decode_path(spec) and request["logits"] != 0:
            continue
        slot = request["slot"]
        want = False if _finished_prefill(request) else bool(start[slot])
        if bool(phase[slot]) != want:
            done = "finished" if _finished_prefill(request) else "unfinished"
            return (f"slot {slot} ({done} prefill: {request['computed']} + {request['chunk']} of "
                    f"{request['prompt_len']} tokens): is_encoder_phase {bool(phase[slot])}, want {want}")
    return None


def sampler_expected(spec: dict) -> dict | None:
    """Per request, what one step commits, in plain loops over the batch:

    * decode path, a request with logits: a slot in the encoder phase at entry
      (``is_commit = is_encoder_phase[decode_slots]``) commits its
      ``argmax_canvas`` -- the first ``valid_canvas_len`` (= its logit count)
      tokens -- and ``num_sampled`` = that count, ``num_rejected`` 0; a denoising
      slot samples nothing and rejects its whole query (``_compute_num_rejected``:
      ``torch.where(is_denoise, query_lens, num_logits - num_sampled)``);
    * a prefill request (and every request on the prefill path): nothing.

    ``step`` and ``accepted_canvas_history_len`` per slot: "+1 for denoise, reset
    to 0 for commit" (Phase 5) for decode slots; every other slot keeps its
    starting value. None where the counts are not whole (see ``_whole_counts``)."""
    if not _whole_counts(spec):
        return None
    start = seeded_state(spec, spec["seed"])
    steps = start["step"].tolist()
    history = start["accepted_canvas_history_len"].tolist()
    num_sampled, num_rejected, committed = [], [], []
    for request in spec["requests"]:
        slot, count = request["slot"], int(request["logits"])
        if not _decode_path(spec) or count == 0:
            num_sampled.append(0)
            num_rejected.append(0)
            committed.append([])
            continue
        commit = bool(start["is_encoder_phase"][slot])
        num_sampled.append(count if commit else 0)
        num_rejected.append(0 if commit else request["chunk"])
        committed.append(start["argmax_canvas"][slot, :count].tolist() if commit else [])
        steps[slot] = 0 if commit else steps[slot] + 1
        history[slot] = 0 if commit else history[slot] + 1
    return {"num_sampled": num_sampled, "num_rejected": num_rejected, "committed": committed,
            "step": steps, "accepted_canvas_history_len": history}


def sampler_observed(output: Any) -> dict:
    counts = output["num_sampled"].tolist()
    rows = output["sampled_token_ids"].tolist()
    return {
        "num_sampled": counts,
        "num_rejected": output["num_rejected"].tolist(),
        "committed": [row[:count] for row, count in zip(rows, counts)],
        "step": output["state"]["step"].tolist(),
        "accepted_canvas_history_len": output["state"]["accepted_canvas_history_len"].tolist(),
    }


SAMPLER_REFERENCE = Reference(expected=sampler_expected, observed=sampler_observed, floats="exact")
"""What one sampler step commits and counts per request, from the seeded
starting state: an independent reading of the commit/denoise rule."""
