"""Inputs for diffusion_gemma's per-slot state stores and its sampler.

Two input models:

* ``DiffusionStatesInputs`` -- a stateful test expressed as data. A spec is a
  list of operations (``model_add``, ``model_remove``, ``states_add``,
  ``states_remove``, ``init_canvas`` and the harness-only ``scribble``, which
  stands in for a sampler step dirtying every state tensor); each side builds
  fresh ``DiffusionGemmaRequestStates`` / ``DiffusionGemmaModelState`` objects
  already holding seeded, non-zero values (a live server's state), replays the
  operations and returns every state tensor, the ``req_id -> slot`` map and
  the exception type (if any) of each operation. The default torch generators
  (CPU, and the example's CUDA device) are seeded with ``seed + step`` before
  each operation, so ``init_canvas``'s ``torch.randint`` draws the same tokens
  on both sides.
  Caller contract: Python int slots in ``[0, max_num_reqs)`` (the runner's
  ``req_index``), prompts as token lists, ``init_canvas`` given distinct
  device int64 slots (what ``add_request`` and ``_finish_prefills`` pass).
  Wide contract adds every slot form the 0.27.1 setitem code accepted: negative
  and out-of-range ints, numpy integer scalars, 0-dim CPU/device tensors and
  one-element lists / 1-D tensors; ``init_canvas`` slots as numpy arrays, CPU
  or device tensors, int32 or int64, empty; prompt lengths past int32.
* ``DiffusionSamplerInputs`` -- one ``DiffusionSampler.__call__`` on a batch
  of decode requests (``n`` logits each, ``n == canvas_length`` unless the
  canvas was truncated) and prefill requests (0 logits, prompt finished this
  chunk or not), with per-slot top-k/top-p, the sampler's tiling chosen by a
  stand-in free-memory figure, seeded logits and a pre-populated state. A
  batch with no draft tokens takes the prefill path. The sampling-states
  stand-in records the expanded slot mapping it receives (the tensor
  ``repeat_interleave(..., output_size=...)`` builds), so a wrong expansion is
  visible even when no request filters.
  Caller contract: ``idx_mapping_np`` intp, ``cu_num_logits_np`` int32,
  distinct slots, at least one request; per-slot ``num_logprobs`` as
  SamplingStates.add_request stores a request's ``logprobs`` (-1 for none, else
  0..3 or the whole vocabulary), any ``--logprobs-mode``, and logprobs stashed
  for some slots at an earlier converging step (``_pending_logprobs``, which
  lives across sampler calls). Wide contract adds int32
  slot maps, int64 counts, empty batches, draft-token totals that do not match
  the logits, logprob counts past the vocabulary, and float64 ``cu_num_logits_np`` with
  half-token counts: the host ``valid_canvas_len_np`` then sums to more than
  the device ``valid_canvas_len`` (``astype(np.int64)`` truncates, a count of
  0.5 becomes a device repeat of 0), i.e. host and device copies disagree.
  Sides rebuilt from later releases are called their release's way
  (``sampler_convention``, checked by ``fits``): 0.31.0 sizes tiles by
  ``torch.accelerator.get_memory_info()`` (stood in during the call) over 3
  fp32 copies per request (0.34.0: 5, 0.28.0: 10 through
  ``current_platform``), reads ``logprob_token_ids_state`` (``NoTokenIdLogprobs``:
  no request asks for token ids) and, from 0.33.0, gets the vocabulary size in
  ``get_top_k_top_p``; 0.34.0 takes ``hidden_states`` plus a per-tile
  ``compute_logits`` (``IdentityHead``: the hidden states are the same logits),
  and its per-tile top-k/top-p calls are folded into the single call of the
  earlier releases (``fold_tile_calls``). The logprob requests above reach
  every convention. docs/findings/drift.md F19: what differs from 0.31.0 on.
"""

from __future__ import annotations

import functools
import inspect
import re
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl, release_of
from strategies.common import devices, fixed_dict, float_dtypes, in_form, int_dtypes, seeded_floats

# The state tensors DiffusionGemmaRequestStates allocates, in __init__ order.
STATE_TENSORS = (
    "is_encoder_phase",
    "canvas",
    "step",
    "accepted_canvas_history",
    "accepted_canvas_history_len",
    "argmax_canvas",
    "prompt_len",
    "confident",
    "self_conditioning_embeds",
)
CALLER_SLOT_FORMS = ("int",)
# Forms of one slot index the 0.27.1 setitem/torch.tensor code accepted.
WIDE_SLOT_FORMS = ("int", "numpy_int32", "numpy_int64", "cpu_scalar", "device_scalar", "list", "cpu_tensor1")
# Forms whose out-of-range values fail on the host (an IndexError) on every
# device; the others would index on the device, where CUDA asserts instead.
HOST_CHECKED_FORMS = ("int", "numpy_int32", "numpy_int64")
INDEX_FORMS = ("numpy", "cpu_tensor", "device_tensor")
REQ_IDS = ("req-0", "req-1", "req-2", "_warmup_0")
INT32_EDGES = (2**31 - 1, 2**31, 2**32)

# Strategies with fixed arguments, built once (strategies/common.py says why).
OPERATION_KINDS = st.sampled_from(["model_add", "model_remove", "states_add", "states_remove", "init_canvas",
                                   "scribble"])
CALLER_SLOT_FORM_CHOICES = st.sampled_from(CALLER_SLOT_FORMS)
WIDE_SLOT_FORM_CHOICES = st.sampled_from(WIDE_SLOT_FORMS)
REQ_ID_CHOICES = st.sampled_from(REQ_IDS)
PROMPT_LENGTHS = st.integers(1, 48)
WIDE_PROMPT_LENGTHS = st.one_of(PROMPT_LENGTHS, st.sampled_from(INT32_EDGES))
INDEX_FORM_CHOICES = st.sampled_from(INDEX_FORMS)
CU_DTYPES = st.sampled_from(["int32", "int64", "float64"])
IDX_DTYPES = st.sampled_from(["int64", "int32"])
TOP_PS = st.sampled_from([1.0, 1.0, 0.9, 0.5])
T_MINS = st.sampled_from([0.0, 0.5])
T_MAXES = st.sampled_from([0.5, 1.0, 2.0])
CONFIDENCE_THRESHOLDS = st.sampled_from([0.5, 5.0])
# A request's SamplingParams.logprobs as vllm/v1/worker/gpu/sample/states.py
# SamplingStates.add_request stores it per slot: None -> NO_LOGPROBS (-1), else
# k >= 0 (0: only the sampled token's). "vocab" stands for the whole vocabulary
# (logprobs=-1, which that add_request turns into vocab_size).
CALLER_LOGPROBS = st.sampled_from([-1, -1, -1, 0, 1, 3, "vocab"])
# vllm's LogprobsMode (--logprobs-mode); DiffusionSampler.__init__ reads it off
# the runner's sampler (logits_mode for the *_logits modes).
LOGPROBS_MODES = st.sampled_from(["raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits"])
ENTROPY_BOUNDS = st.sampled_from([0.1, 1.0, 100.0])


# ---------------------------------------------------------------------------
# Shared: dimensions and a state that looks like a live server's.
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def state_dims(*, max_reqs: int = 6, max_canvas: int = 6, max_vocab: int = 16) -> st.SearchStrategy[dict]:
    """Sizes of a ``DiffusionGemmaRequestStates`` (small: the code under test is index math)."""
    if max_reqs < 1 or max_canvas < 1 or max_vocab < 2:
        raise HarnessError("state_dims: need max_reqs >= 1, max_canvas >= 1, max_vocab >= 2")
    return fixed_dict({
        "max_num_reqs": st.integers(1, max_reqs),
        "canvas_length": st.integers(1, max_canvas),
        "vocab_size": st.integers(2, max_vocab),
        "hidden_size": st.integers(1, 4),
        "stability_threshold": st.integers(1, 3),
        "max_denoising_steps": st.integers(1, 6),
        "seed": st.integers(0, 2**31 - 1),
    })


def seed_rng(seed: int, device: str) -> None:
    """Seed the generators ``torch.randint``/``rand_like`` draw from on ``device``.

    Rather than ``torch.manual_seed``: on CPU-only torch that also queues a
    lazy CUDA seeding call that captures a stack trace, about 1 ms a call.
    """
    torch.default_generator.manual_seed(seed)
    where = torch.device(device)
    if where.type == "cuda":
        index = where.index if where.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)


@contextmanager
def one_cpu_thread() -> Iterator[None]:
    """Run tiny CPU kernels on one thread.

    These tensors hold a few dozen elements: OpenMP fan-out only adds its wake
    latency (about 16 ms per parallel kernel on a 2-vCPU CI host). Values do
    not depend on it, and both sides run the same way.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _module(impl: Impl) -> ModuleType:
    if impl.owner is None:
        raise HarnessError(f"{impl.path} must be a method of a diffusion_gemma class")
    return impl.module


def _random_like(tensor: torch.Tensor, high: int, generator: torch.Generator, seed: int) -> torch.Tensor:
    """Seeded non-zero-looking contents for one state tensor, built on the CPU."""
    if tensor.is_floating_point():
        return seeded_floats(tuple(tensor.shape), "float32", seed, "cpu").to(tensor.dtype)
    if tensor.dtype == torch.bool:
        return torch.randint(0, 2, tuple(tensor.shape), generator=generator).bool()
    return torch.randint(1, max(high, 2), tuple(tensor.shape), generator=generator).to(tensor.dtype)


def state_payload(states: Any, seed: int) -> dict[str, torch.Tensor]:
    """Seeded values for every state tensor, already on the states' device."""
    generator = torch.Generator().manual_seed(seed)
    highs = {"canvas": states.vocab_size, "argmax_canvas": states.vocab_size,
             "accepted_canvas_history": states.vocab_size, "step": states.max_denoising_steps + 1,
             "accepted_canvas_history_len": states.stability_threshold + 2, "prompt_len": 64}
    return {
        name: _random_like(getattr(states, name), highs.get(name, 2), generator, seed + i).to(states.device)
        for i, name in enumerate(STATE_TENSORS)
    }


def build_states(module: ModuleType, spec: dict) -> Any:
    """The side's own ``DiffusionGemmaRequestStates``, pre-populated from the seed."""
    states = module.DiffusionGemmaRequestStates(
        max_num_reqs=spec["max_num_reqs"],
        canvas_length=spec["canvas_length"],
        vocab_size=spec["vocab_size"],
        max_denoising_steps=spec["max_denoising_steps"],
        device=torch.device(spec["device"]),
        hidden_size=spec["hidden_size"],
        stability_threshold=spec["stability_threshold"],
    )
    for name, value in state_payload(states, spec["seed"]).items():
        getattr(states, name).copy_(value)
    return states


def snapshot(states: Any) -> dict[str, torch.Tensor]:
    return {name: getattr(states, name) for name in STATE_TENSORS}


# ---------------------------------------------------------------------------
# DiffusionGemmaRequestStates / DiffusionGemmaModelState: operations as data.
# ---------------------------------------------------------------------------


def _slots(draw: st.DrawFn, n: int, wide: bool) -> dict:
    """One slot index and its form."""
    form = draw(WIDE_SLOT_FORM_CHOICES if wide else CALLER_SLOT_FORM_CHOICES)
    if not wide:
        low, high = 0, n - 1
    elif form in HOST_CHECKED_FORMS:
        low, high = -n - 1, n  # one past either end: an IndexError on both sides
    else:
        low, high = -n, n - 1
    return {"slot": draw(st.integers(low, high)), "slot_form": form}


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _canvas_slots(n: int, wide: bool) -> st.SearchStrategy[list[int]]:
    """Distinct slots: duplicate scatter targets have no defined winner on CUDA."""
    pool = list(range(-n, n)) if wide else list(range(n))
    return st.lists(st.sampled_from(pool), min_size=0 if wide else 1, max_size=n, unique_by=lambda s: s % n)


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
@st.composite
def _operations(draw: st.DrawFn, n: int, wide: bool) -> dict:
    kind = draw(OPERATION_KINDS)
    if kind in ("model_add", "states_add", "states_remove"):
        op = {"op": kind, **_slots(draw, n, wide)}
        if kind == "model_add":
            op["req_id"] = draw(REQ_ID_CHOICES)
            op["prompt_len"] = draw(WIDE_PROMPT_LENGTHS if wide else PROMPT_LENGTHS)
        return op
    if kind == "model_remove":
        return {"op": kind, "req_id": draw(REQ_ID_CHOICES)}
    if kind == "init_canvas":
        slots = draw(_canvas_slots(n, wide))
        return {"op": kind, "slots": slots,
                "form": draw(INDEX_FORM_CHOICES) if wide else "device_tensor",
                "dtype": draw(int_dtypes()) if wide else "int64"}
    return {"op": kind}


@st.composite
def _states_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = {"device": draw(devices(available)), **draw(state_dims())}
    spec["ops"] = draw(st.lists(_operations(spec["max_num_reqs"], wide), min_size=1, max_size=10))
    return spec


def slot_in_form(slot: int, form: str, device: str) -> Any:
    """One slot index as a caller could have passed it to the 0.27.1 code."""
    makers: dict[str, Callable[[], Any]] = {
        "int": lambda: slot,
        "numpy_int32": lambda: np.int32(slot),
        "numpy_int64": lambda: np.int64(slot),
        "cpu_scalar": lambda: torch.tensor(slot),
        "device_scalar": lambda: torch.tensor(slot, device=device),
        "list": lambda: [slot],
        "cpu_tensor1": lambda: torch.tensor([slot]),
    }
    if form not in makers:
        raise HarnessError(f"unknown slot form {form!r}; expected one of {sorted(makers)}")
    return makers[form]()


def index_in_form(slots: list[int], form: str, dtype: str, device: str) -> Any:
    """A 1-D slot index array for ``init_canvas`` in the requested form (never a list)."""
    if form not in INDEX_FORMS:
        raise HarnessError(f"unknown index form {form!r}; expected one of {list(INDEX_FORMS)}")
    return in_form(slots, form, dtype, device)


def _bind(op: dict, step: int, spec: dict, states: Any, model: Any, add: Callable[..., None]) -> Callable[[], Any]:
    """One operation with its arguments built now, outside the timed call."""
    device = spec["device"]
    kind = op["op"]
    if kind == "model_add":
        slot = slot_in_form(op["slot"], op["slot_form"], device)
        n = op["prompt_len"]
        # A range is a sequence with len() == n and costs nothing for n past int32.
        data = SimpleNamespace(req_id=op["req_id"], prompt_token_ids=list(range(n)) if n <= 4096 else range(n))
        return lambda: add(model, slot, data)
    if kind == "model_remove":
        return lambda: model.remove_request(op["req_id"])
    if kind in ("states_add", "states_remove"):
        slot = slot_in_form(op["slot"], op["slot_form"], device)
        method = states.add_request if kind == "states_add" else states.remove_request
        return lambda: method(slot)
    if kind == "init_canvas":
        index = index_in_form(op["slots"], op["form"], op["dtype"], device)
        return lambda: states.init_canvas(index)
    if kind == "scribble":
        payload = state_payload(states, spec["seed"] + 1000 * (step + 1))
        return lambda: [getattr(states, name).copy_(value) for name, value in payload.items()]
    raise HarnessError(f"unknown operation {kind!r} in {op!r}")


class DiffusionStatesInputs:
    """``DiffusionGemmaModelState.add_request`` and the ``DiffusionGemmaRequestStates``
    slot stores, replayed as a sequence of operations; returns the whole state."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _states_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        module = _module(impl)
        states = build_states(module, spec)
        model = module.DiffusionGemmaModelState(states)
        # model_add runs the target's own function (a planted mutant's, say).
        steps = [_bind(op, i, spec, states, model, impl.function) for i, op in enumerate(spec["ops"])]
        seed, device = spec["seed"], spec["device"]

        def call() -> dict:
            errors: list[str | None] = []
            with one_cpu_thread():
                for i, step in enumerate(steps):
                    seed_rng(seed + i, device)
                    try:
                        step()
                        errors.append(None)
                    except Exception as exc:  # noqa: BLE001 -- an op's exception is part of the observable outcome
                        errors.append(type(exc).__name__)
            return {"state": snapshot(states), "req_id_to_index": dict(model._req_id_to_index), "errors": errors}

        return call


# ---------------------------------------------------------------------------
# DiffusionSampler.__call__
# ---------------------------------------------------------------------------


class RecordingSamplingStates:
    """Stand-in for vllm/v1/worker/gpu/sample/states.py::SamplingStates.

    ``get_top_k_top_p`` and ``max_num_logprobs`` are upstream's bodies; the
    former also records the expanded slot mapping it was given.
    """

    def __init__(self, top_k: list[int], top_p: list[float], num_logprobs: list[int], vocab_size: int,
                 device: str) -> None:
        self.vocab_size = vocab_size
        k_np = np.asarray(top_k, dtype=np.int32)
        p_np = np.asarray(top_p, dtype=np.float32)
        self.top_k = SimpleNamespace(np=k_np, gpu=torch.from_numpy(k_np).to(device))
        self.top_p = SimpleNamespace(np=p_np, gpu=torch.from_numpy(p_np).to(device))
        self.num_logprobs = np.asarray(num_logprobs, dtype=np.int32)
        self.calls: list[dict] = []
        self.vocab_sizes: list[int] = []  # what >= 0.33.0 passed as get_top_k_top_p's vocab_size

    def get_top_k_top_p(
        self, expanded_idx_mapping: torch.Tensor, idx_mapping_np: np.ndarray, vocab_size: int | None = None
    ) -> Any:
        """Upstream's body; from 0.33.0 upstream takes the logits' ``vocab_size`` and also returns
        ``has_topp_only_rows``, so a call with it gets that release's three values."""
        self.calls.append({"expanded_idx_mapping": expanded_idx_mapping.clone(),
                           "idx_mapping_np": np.array(idx_mapping_np)})
        top_k_np = self.top_k.np[idx_mapping_np]
        top_p_np = self.top_p.np[idx_mapping_np]
        do_top_k = np.any(top_k_np != self.vocab_size)
        do_top_p = np.any(top_p_np != 1.0)
        top_k = self.top_k.gpu[expanded_idx_mapping] if do_top_k else None
        top_p = self.top_p.gpu[expanded_idx_mapping] if do_top_p else None
        if vocab_size is None:
            return top_k, top_p
        self.vocab_sizes.append(vocab_size)
        return top_k, top_p, bool(do_top_p and np.any((top_k_np >= vocab_size) & (top_p_np < 1.0)))

    def max_num_logprobs(self, idx_mapping_np: np.ndarray) -> int:
        return int(np.max(self.num_logprobs[idx_mapping_np]))


class NoTokenIdLogprobs:
    """Stand-in for vllm/v1/worker/gpu/sample/logprob.py::LogprobTokenIdsState (read from 0.31.0 on):
    no request of the batch asks for ``logprob_token_ids``. 0.28.0's sampler has no such request, so
    a contract both sides serve draws none; ``max_num_token_ids`` is upstream's ``max(initial=0)``
    over counts that are all 0."""

    def max_num_token_ids(self, idx_mapping_np: np.ndarray) -> int:
        return 0


class IdentityHead:
    """``compute_logits`` for the 0.34.0 convention: the "hidden states" handed to ``__call__`` are the
    logits the earlier releases are handed, and the head returns each tile's rows as they are, so both
    conventions sample the same logits. Records the rows of each call."""

    def __init__(self) -> None:
        self.rows: list[int] = []

    def __call__(self, hidden_states: torch.Tensor) -> torch.Tensor:
        self.rows.append(int(hidden_states.shape[0]))
        return hidden_states


@dataclass(frozen=True)
class SamplerConvention:
    """How a release's runner calls ``DiffusionSampler``.

    * ``call``: ``"logits"``: ``__call__(logits, input_batch)`` (<= 0.33.0); ``"hidden_states"``:
      ``__call__(hidden_states, input_batch)`` with ``compute_logits`` given to ``__init__``, run per tile
      (0.34.0);
    * ``memory``: where the tile size's free-memory figure comes from: ``"platform"``
      (``current_platform.mem_get_info()``, <= 0.30.0) or ``"accelerator"``
      (``torch.accelerator.get_memory_info()``, 0.31.0 on);
    * ``copies``: fp32 ``[CL, vocab]`` copies per request the tile budget assumes (10, then 3, then 5)."""

    call: str
    memory: str
    copies: int


# By release, for a side whose source cannot be read (the source, where readable, decides).
RELEASE_CONVENTIONS = (
    ((0, 34), SamplerConvention("hidden_states", "accelerator", 5)),
    ((0, 31), SamplerConvention("logits", "accelerator", 3)),
    ((0, 0), SamplerConvention("logits", "platform", 10)),
)
_COPIES_RE = re.compile(r"self\.vocab_size \* 4 \* (\d+)")
# DiffusionSampler.__init__ parameters the input model passes (compute_logits only to the 0.34.0 form).
SAMPLER_INIT_PARAMETERS = {"self", "sampler", "diffusion_config", "vocab_size", "diffusion_states",
                           "compute_logits", "confidence_threshold", "t_min", "t_max", "entropy_bound",
                           "embed_weight", "normalizer"}


def sampler_convention(impl: Impl) -> SamplerConvention | str:
    """The side's convention (``SamplerConvention``), or why the input model cannot call it: read off
    ``__call__``'s and ``__init__``'s signatures and ``__call__``'s source, else the side's release."""
    if impl.owner is None:
        return f"{impl.path} is not a DiffusionSampler method"
    try:
        call = list(inspect.signature(impl.function).parameters.values())
        init = inspect.signature(impl.owner.__init__).parameters
    except (TypeError, ValueError) as exc:
        return f"its signature cannot be read ({exc})"
    names = [p.name for p in call]
    if len(names) < 3 or names[1] not in ("logits", "hidden_states") or names[2] != "input_batch":
        return (f"__call__{tuple(names)} is neither (self, logits, input_batch, ...) nor "
                "(self, hidden_states, input_batch, ...)")
    extra = [p.name for p in call[3:] if p.default is inspect.Parameter.empty
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = [name for name, p in init.items() if p.default is inspect.Parameter.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in SAMPLER_INIT_PARAMETERS]
    if extra or unknown:
        return f"it requires parameters the input model does not pass: {extra + unknown}"
    form = names[1]
    if (form == "hidden_states") != ("compute_logits" in init):
        return (f"__call__ takes {form} but __init__ "
                + ("lacks compute_logits" if form == "hidden_states" else "asks for compute_logits"))
    try:
        source = inspect.getsource(impl.function)
    except (OSError, TypeError):
        source = None
    if source is not None:
        copies = _COPIES_RE.search(source)
        memory = ("accelerator" if "torch.accelerator.get_memory_info" in source
                  else "platform" if "current_platform.mem_get_info" in source else None)
        if copies is None or memory is None:
            return "its tile budget (free memory over fp32 [CL, vocab] copies per request) cannot be read off __call__"
        return SamplerConvention(form, memory, int(copies[1]))
    # Unreadable source (a mutant built in memory): the side's release, else the copies' (0.27.1/0.28.0).
    release = release_of(impl)
    found = re.match(r"(\d+)\.(\d+)", release or "0.0")
    if not found:
        return f"__call__'s source cannot be read and its release {release!r} is not a version"
    version = (int(found[1]), int(found[2]))
    convention = next(c for since, c in RELEASE_CONVENTIONS if version >= since)
    if convention.call != form:
        return f"release {release or 'of the copies'} calls with {convention.call}, its signature with {form}"
    return convention


@contextmanager
def accelerator_free_memory(free: int) -> Iterator[None]:
    """``torch.accelerator.get_memory_info()`` reports ``free`` bytes free inside (0.31.0 on sizes the
    sampler's tiles by it; a CPU-only torch raises there): the stand-in 0.28.0's
    ``current_platform.mem_get_info()`` has, for the releases that read torch directly."""
    accelerator = torch.accelerator
    before = accelerator.get_memory_info
    accelerator.get_memory_info = lambda device_index=None: (free, free)  # type: ignore[assignment]
    try:
        yield
    finally:
        accelerator.get_memory_info = before  # type: ignore[assignment]


@contextmanager
def reference_row_stats(module: ModuleType, device: str) -> Iterator[None]:
    """On CUDA, a side from 0.31.0 on computes its rows' argmax, Gumbel-max sample and entropy in a Triton
    kernel (``sample_row_stats``) whose noise is ``tl.rand`` from a seed; 0.28.0 draws it with
    ``torch.rand_like``. No input makes the two draw alike, so every row with a temperature above 0 would
    differ by design. Inside, the side's ``sample_row_stats`` runs upstream's own PyTorch form of the same
    statistics, ``sample_row_stats_reference`` (what upstream runs off CUDA and tests the kernel against),
    as it does on the CPU. The kernel itself is not compared (docs/findings/drift.md F19)."""
    kernel = getattr(module, "sample_row_stats", None)
    reference = getattr(module, "sample_row_stats_reference", None)
    if kernel is None or reference is None or not device.startswith("cuda"):
        yield
        return

    def on_reference(logits: Any, temps: Any, canvas_len: int, seed: int, probs_dtype: Any) -> Any:
        return reference(logits, temps, canvas_len, probs_dtype)

    module.sample_row_stats = on_reference
    try:
        yield
    finally:
        module.sample_row_stats = kernel


def fold_tile_calls(calls: list[dict], spec: dict) -> list[dict]:
    """0.34.0 calls ``get_top_k_top_p`` once per tile with each slot repeated the canvas width W
    (``tile_slots.repeat_interleave(W, ...)``, phantom rows of a truncated canvas included); earlier
    releases once, each decode slot repeated its real logit count. Folded into that one call: each
    slot's run of W cut to its real rows, the tiles in call order. A call not made of runs of W is
    kept as it came, so the difference shows."""
    if not calls:
        return calls
    width = spec["canvas_length"]
    valid = {r["slot"]: int(r["logits"]) for r in spec["requests"]}
    expanded, slots = [], []
    for call in calls:
        mapping, tile = call["expanded_idx_mapping"], call["idx_mapping_np"]
        if mapping.shape[0] != width * len(tile) or any(int(s) not in valid for s in tile.tolist()):
            return calls
        for i, slot in enumerate(tile.tolist()):
            expanded.append(mapping[i * width:i * width + valid[int(slot)]])
        slots.append(tile)
    return [{"expanded_idx_mapping": torch.cat(expanded), "idx_mapping_np": np.concatenate(slots)}]


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
@st.composite
def _request(draw: st.DrawFn, canvas: int, wide: bool) -> dict:
    """One request of the batch: decode (its canvas's logits) or prefill (none)."""
    prompt = draw(st.integers(1, 16))
    if draw(st.integers(0, 9)) < 7:
        full = draw(st.integers(0, 3)) > 0  # truncated near max_model_len one time in four
        scheduled = canvas if full else draw(st.integers(1, canvas))
        logits: float = scheduled
        if wide and draw(st.integers(0, 4)) == 0:
            logits -= 0.5  # a half-token count: only a float64 cu_num_logits_np keeps it
        return {"logits": logits, "prompt_len": prompt, "computed": prompt, "chunk": scheduled}
    # A prefill chunk that finishes the prompt, or (prompt > 1) one that stops short.
    done = prompt == 1 or draw(st.booleans())
    chunk = draw(st.integers(1, prompt if done else prompt - 1))
    computed = prompt - chunk if done else draw(st.integers(0, prompt - 1 - chunk))
    return {"logits": 0, "prompt_len": prompt, "computed": computed, "chunk": chunk}


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _slot_orders(n: int) -> st.SearchStrategy[list[int]]:
    return st.permutations(range(n))


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _top_ks(vocab: int, n: int) -> st.SearchStrategy[list[int]]:
    """Per-slot top-k: mostly off (``vocab``), else greedy or half the vocabulary."""
    return st.lists(st.sampled_from([vocab, vocab, 1, max(1, vocab // 2)]), min_size=n, max_size=n)


@st.composite
def _sampler_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    spec = {"device": draw(devices(available)), **draw(state_dims())}
    n, canvas, vocab = spec["max_num_reqs"], spec["canvas_length"], spec["vocab_size"]
    empty = wide and draw(st.integers(0, 9)) == 0  # an empty batch, now and then
    requests = [] if empty else draw(st.lists(_request(canvas, wide), min_size=1, max_size=n))
    slots = draw(_slot_orders(n))[: len(requests)]
    for request, slot in zip(requests, slots):
        request["slot"] = slot
    cu_dtype = draw(CU_DTYPES) if wide else "int32"
    if cu_dtype != "float64":
        for request in requests:
            request["logits"] = int(request["logits"] + 0.5)  # back to a whole count
    decode_logits = sum(int(r["logits"]) for r in requests)
    spec.update(
        requests=requests,
        num_draft_tokens=draw(st.integers(0, decode_logits + canvas)) if wide else decode_logits,
        # 0: less free memory than one request needs (a nearly full GPU): upstream clamps the tile to 1.
        tile=draw(st.integers(0, max(1, len(requests)))),
        top_k=draw(_top_ks(vocab, n)),
        top_p=draw(st.lists(TOP_PS, min_size=n, max_size=n)),
        num_logprobs=draw(_num_logprobs(vocab, n, wide)),
        logprobs_mode=draw(LOGPROBS_MODES),
        logits_dtype=draw(float_dtypes(("float32", "bfloat16"))),
        cu_dtype=cu_dtype,
        idx_dtype=draw(IDX_DTYPES) if wide else "int64",
        t_min=draw(T_MINS),
        t_max=draw(T_MAXES),
        confidence_threshold=draw(CONFIDENCE_THRESHOLDS),
        entropy_bound=draw(ENTROPY_BOUNDS),
    )
    # DiffusionSampler._pending_logprobs outlives a call: a slot that converged
    # in an earlier step (with logprobs asked in that batch) keeps its stash until
    # the step that commits it pops it (__call__), or add_request purges it. A
    # live server's sampler holds some; drawn only when this batch asks for any.
    # Not for the batch's prefill slots (their add_request purged the slot), but
    # for slots outside the batch (running requests this step did not schedule).
    asks = max(spec["num_logprobs"]) >= 0
    prefilling = {r["slot"] for r in requests if r["logits"] == 0}
    spec["stashed_logprobs"] = draw(_stash_slots(tuple(s for s in range(n) if s not in prefilling))) if asks else []
    return spec


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _stash_slots(pool: tuple[int, ...]) -> st.SearchStrategy[list[int]]:
    return st.lists(st.sampled_from(pool), unique=True, max_size=len(pool)) if pool else st.just([])


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _num_logprobs(vocab: int, n: int, wide: bool) -> st.SearchStrategy[list[int]]:
    """Per-slot ``SamplingStates.num_logprobs`` (``max_num_logprobs`` reads their max over the batch)."""
    if wide:
        return st.lists(st.integers(-1, 3), min_size=n, max_size=n)
    return st.lists(CALLER_LOGPROBS.map(lambda k: vocab if k == "vocab" else k), min_size=n, max_size=n)


def sampler_sync_budget(spec: dict) -> int:
    """Syncs per ``DiffusionSampler.__call__`` on CUDA by design: 0, except the logprobs
    branch 0.28.0 kept (``max_num_logprobs >= 0``): per tile ``just_converged.any()``,
    then ``nonzero()`` and per converged slot ``local_idx.item()``, ``slot.item()`` and
    two 0-d-tensor indexings (``tile_slots[local_idx]``, ``argmax_tokens[local_idx]``,
    each an ``item()``); once ``is_committing.any()``. An upper bound (every decode slot
    converging), read off the code, not yet measured; for the catalog's ``sync_budget``."""
    requests = spec["requests"]
    if spec["num_draft_tokens"] == 0 or not requests:
        return 0
    slots = [r["slot"] for r in requests]
    if max(spec["num_logprobs"][s] for s in slots) < 0:
        return 0
    decode = sum(1 for r in requests if int(r["logits"]) > 0)
    group = max(1, min(decode, spec["tile"]))  # _sampler's free-memory figure makes the budget `tile`
    tiles = -(-decode // group)
    return 1 + 2 * tiles + 4 * decode


def input_batch_fields(spec: dict) -> dict[str, Any]:
    """The ``InputBatch`` fields the sampler reads, built like the model runner builds them."""
    device, requests = spec["device"], spec["requests"]
    slots = [r["slot"] for r in requests]
    counts = np.asarray([r["logits"] for r in requests], dtype=np.float64)
    prompt = np.asarray([r["prompt_len"] for r in requests], dtype=np.int32)
    scheduled = np.asarray([r["chunk"] for r in requests], dtype=np.int32)
    computed = np.asarray([r["computed"] for r in requests], dtype=np.int32)
    query_start = np.concatenate([[0], np.cumsum(scheduled)]).astype(np.int32)
    idx_np = np.asarray(slots, dtype=np.intp if spec["idx_dtype"] == "int64" else np.int32)
    return dict(
        num_reqs=len(requests),
        num_draft_tokens=spec["num_draft_tokens"],
        idx_mapping=torch.tensor(slots, dtype=torch.int64).to(device),
        idx_mapping_np=idx_np,
        cu_num_logits_np=np.concatenate([[0], np.cumsum(counts)]).astype(spec["cu_dtype"]),
        num_computed_prefill_tokens_np=computed,
        num_scheduled_tokens=scheduled,
        prefill_len_np=prompt,
        query_start_loc_np=query_start,
        query_start_loc=torch.from_numpy(query_start).to(device),
    )


def _logits(spec: dict) -> torch.Tensor:
    """One row per logit the device side will index: the truncated (integer) counts."""
    rows = sum(int(r["logits"]) for r in spec["requests"])
    return seeded_floats((rows, spec["vocab_size"]), spec["logits_dtype"], spec["seed"] + 7, spec["device"])


def free_memory(spec: dict, convention: SamplerConvention) -> int:
    """The free-memory figure that makes the side's tile ``spec["tile"]`` requests (0: one request):
    upstream's budget is ``int(free * 0.5) // (CL * vocab * 4 * copies)``."""
    return 2 * spec["tile"] * spec["canvas_length"] * spec["vocab_size"] * 4 * convention.copies


def _sampler(module: ModuleType, spec: dict, states: Any,
             convention: SamplerConvention = RELEASE_CONVENTIONS[-1][1]) -> tuple[Any, RecordingSamplingStates]:
    device, n, canvas, vocab = spec["device"], spec["max_num_reqs"], spec["canvas_length"], spec["vocab_size"]
    module.UVA_DEVICE = device
    # Upstream tiles by free memory: `copies` fp32 copies of [CL, vocab] per request.
    module.current_platform.free_memory = free_memory(spec, convention)
    sampling = RecordingSamplingStates(spec["top_k"], spec["top_p"], spec["num_logprobs"], vocab, device)
    draft_tokens = torch.randint(0, vocab, (n, canvas + 1), generator=torch.Generator().manual_seed(spec["seed"] + 3))
    runner_sampler = SimpleNamespace(sampling_states=sampling, req_states=SimpleNamespace(
        draft_tokens=draft_tokens.to(device)), logprobs_mode=spec.get("logprobs_mode", "raw_logprobs"),
        logprob_token_ids_state=NoTokenIdLogprobs())
    head = {"compute_logits": IdentityHead()} if convention.call == "hidden_states" else {}
    sampler = module.DiffusionSampler(
        **head,
        sampler=runner_sampler,
        diffusion_config=SimpleNamespace(canvas_length=canvas),
        vocab_size=vocab,
        diffusion_states=states,
        confidence_threshold=spec["confidence_threshold"],
        t_min=spec["t_min"],
        t_max=spec["t_max"],
        entropy_bound=spec["entropy_bound"],
        embed_weight=seeded_floats((vocab, spec["hidden_size"]), "float32", spec["seed"] + 5, device),
        normalizer=torch.tensor(spec["hidden_size"] ** 0.5, device=device),
    )
    stash_logprobs(module, spec, sampler)
    return sampler, sampling


def stash_logprobs(module: ModuleType, spec: dict, sampler: Any) -> None:
    """What an earlier converging step left in ``sampler._pending_logprobs`` for
    ``spec["stashed_logprobs"]``: the side's own ``compute_topk_scores`` over seeded
    ``[CL, vocab]`` logits, as that step's __call__ computed it (both sides get the
    same values; each its own LogprobsTensors)."""
    k = max(spec["num_logprobs"])
    canvas, vocab = spec["canvas_length"], spec["vocab_size"]
    for slot in spec.get("stashed_logprobs", ()):
        scaled = seeded_floats((canvas, vocab), "float32", spec["seed"] + 11 + slot, spec["device"])
        sampler._pending_logprobs[slot] = module.compute_topk_scores(
            scaled, k, scaled.argmax(dim=-1), logits_mode=sampler.logits_mode)


def _plain(value: Any) -> Any:
    """A side's own ``LogprobsTensors`` as a dict: the two copies' classes differ."""
    return None if value is None else dict(value._asdict())


class DiffusionSamplerInputs:
    """``DiffusionSampler.__call__`` on a seeded batch and state, each side called its release's way
    (``sampler_convention``): ``(logits, input_batch)`` up to 0.33.0; from 0.34.0
    ``(hidden_states, input_batch)`` with ``compute_logits`` an ``IdentityHead``, the hidden states being
    the same logits, so both sides sample the same rows. The tile size is set through the side's own
    free-memory source and budget (``free_memory``), so both sides tile alike; 0.34.0's per-tile
    ``get_top_k_top_p`` calls are folded into the one call of the earlier releases (``fold_tile_calls``)."""

    # fits() judges __call__'s signature: 0.34.0 renamed logits to hidden_states (fuzz/releases/sides.py).
    fits_checks_signature = True

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _sampler_specs(available, contract)

    def fits(self, impl: Impl) -> str | None:
        """None when the side's calling convention is known (``sampler_convention``), else why not."""
        convention = sampler_convention(impl)
        return convention if isinstance(convention, str) else None

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        module = _module(impl)
        convention = sampler_convention(impl)
        if isinstance(convention, str):
            raise HarnessError(f"{impl.path}: {convention}")
        states = build_states(module, spec)
        sampler, sampling = _sampler(module, spec, states, convention)
        logits, fields, seed, device = _logits(spec), input_batch_fields(spec), spec["seed"], spec["device"]
        free = free_memory(spec, convention)
        memory = functools.partial(accelerator_free_memory, free) if convention.memory == "accelerator" else nullcontext
        fold = fold_tile_calls if convention.call == "hidden_states" else (lambda calls, _: calls)
        row_stats = functools.partial(reference_row_stats, module, str(device))

        def call() -> dict:
            # The batch's host arrays sit in a dict in this closure, where
            # --stress finds and poisons them once the call returns.
            batch = SimpleNamespace(**fields)
            seed_rng(seed, device)  # Gumbel noise and canvas re-init draw from the default generators
            with one_cpu_thread(), memory(), row_stats():
                # 0.34.0: `logits` are the hidden states, sampler.compute_logits the identity.
                out = impl.function(sampler, logits, batch)
            return {
                "sampled_token_ids": out.sampled_token_ids,
                "num_sampled": out.num_sampled,
                "num_rejected": out.num_rejected,
                "logprobs": _plain(out.logprobs_tensors),
                "top_k_top_p_calls": fold(sampling.calls, spec),
                "state": snapshot(states),
                "draft_tokens": sampler.req_states.draft_tokens,
                "pending_logprobs": {k: _plain(v) for k, v in sampler._pending_logprobs.items()},
            }

        return call
