"""Inputs of the model runner's staging buffers (vllm/v1/worker/gpu/buffer_utils.py, 0.33.0 / 0.34.0).

Two targets, one copy module (legacy/buffer_utils.py, optimized/buffer_utils.py):

* ``StagedWriteInputs`` (staged-write-tensor-apply-write): a ``StagedWriteTensor`` driven for several
  steps the way the v1 GPU runner drives one: each step stages a few writes, then ``apply_write()``
  (the runner's ``apply_staged_writes`` runs every step, with or without staged writes). Callers
  (0.34.0):
    - states.py:RequestState.add_request: ``all_token_ids.stage_write(req_idx, 0, all_token_ids)``
      (a list[int], 2-D int32, ``uva_instead_of_gpu=not use_dense_all_token_ids``) and
      ``total_len`` / ``num_computed_tokens.stage_write_elem(req_idx, n)`` (1-D int32);
    - block_table.py:BlockTables.append_block_ids: ``stage_write(req_index, start, block_ids)``,
      ``start`` the row's blocks so far (0 on overwrite), ``block_ids`` a list, possibly empty;
    - mm/rope.py:RopeState (add_request): ``stage_write(num_dims * req_idx + i, 0, pos)``, ``pos`` =
      ``prefill_positions[i].numpy()`` (an int64 ndarray; 0.33.0 passed ``.tolist()``);
    - sample/logit_bias.py:LogitBiasState.add_request: ``stage_write(req_idx, 0, logit_bias.keys())``
      (int32) and ``logit_bias.values()`` (float32); allowed/stop token ids as lists;
    - sample/bad_words.py, sample/logprob.py, sample/trace_replay.py (``uva_instead_of_gpu=True``):
      lists.
  One request's row is written once per step (a slot is freed and re-added across steps), so the
  writes of one step go to distinct rows and fit their row (block_table.py raises before an
  overflowing write). Under ``"wide"``: int64 tensors, tuples / ranges / ``array.array`` values
  (0.33.0 took any ``Iterable``; a one-shot iterator is not drawn: 0.34.0 narrowed the type to
  ``Collection`` and calls ``len``), ``stage_write_elem`` on a 2-D tensor and a pool depth of 2-3
  (``set_default_max_concurrency``).
* ``PoolInputs`` (uva-buffer-pool-copy-to-uva): a ``UvaBufferPool`` given a sequence of
  ``copy_to_uva(x)`` calls. Callers: ``StagedWriteTensor.apply_write`` (lists of ints; the contents
  pool is built with size 1 and grows), ``UvaBackedTensor.copy_to_uva`` (``self.np`` or
  ``self.np[:n]``, 1-D or 2-D: block_table.py's ``num_blocks`` is ``(groups, max_num_reqs)``).
  ``"wide"`` adds a CPU tensor (``UvaBufferPool.copy_to_gpu`` passes one).

Both draw the platform too: ``uva`` False builds the buffers with ``is_uva_available()`` false, the
``NonUvaBuffer`` fallback (no pinned memory, or NVIDIA Confidential Computing in 0.34.0).

What a side supports (``SideSupport``, from ``for_sides``: fuzz.interface.InputModel): a side rebuilt from a
release before 0.30.0 (``--legacy vllm==0.28.0``) has no ``NonUvaBuffer`` -- its ``UvaBuffer`` raises
``RuntimeError("UVA is not available")`` on such a platform, where it was never run -- and its
``UvaBufferPool.copy_to_uva`` does not grow a slot (its callers, 0.28.0's ``StagedWriteTensor.apply_write``
with one write per row and no contents pool, and ``UvaBackedTensor``, never pass more rows than the size).
With such a side the fallback (``uva`` False) is not drawn, and ``PoolInputs`` draws ``n`` up to the pool's
size only: those inputs are outside what that release was built for, not differences to find. A spec saved
with them still runs on it: ``uva`` False is refused there as an input the side cannot take (HarnessError),
a grown slot shows as the side's own error.

Values are seeded (``{"len", "seed"}``), so a spec stays small when a row is long (rows past
``_WRITE_BLOCK_SIZE`` = 1024 elements take two kernel programs).

On CUDA the engine waits on each step's output before staging the step after next, which is what
makes the pool depth of 2 safe (warmup.py:_run_step: "UvaBufferPool reuses a staging slot two writes
later, which is safe in serving because the engine waits on each step's output"); the thunks make
that wait between steps, as the consumer's (``consumer_reads``), not the call's.
"""

from __future__ import annotations

import array
import functools
import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from fuzz.api import FORM_ATTRIBUTE, HarnessError, Impl, consumer_reads, engine_waited
from strategies.common import choice_of, devices

DTYPES = {"int32": torch.int32, "int64": torch.int64, "float32": torch.float32}
TYPECODES = {"int32": "i", "int64": "q", "float32": "f"}
LONG_ROW = 1100  # > _WRITE_BLOCK_SIZE: a write of this many elements takes two kernel programs

# Value forms a caller passes to stage_write, per tensor dtype (module docstring, "caller").
CALLER_FORMS = {"int32": ("list", "ndarray", "dict_keys"), "float32": ("list", "dict_values")}
WIDE_FORMS = {"int32": ("list", "ndarray", "dict_keys", "tuple", "range", "array"),
              "int64": ("list", "ndarray", "tuple", "range", "array"),
              "float32": ("list", "dict_values", "tuple", "array")}


def staged_values(dtype: str, form: str, length: int, seed: int) -> list:
    """The values of one write, as Python numbers (what the tensor must hold after the cast):
    token-id-like ints (distinct for ``dict_keys``, consecutive for ``range``) or floats."""
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return [float(v) for v in np.float32(rng.standard_normal(length) * 100)]
    if form == "range":
        first = int(rng.integers(0, 1 << 20))
        return list(range(first, first + length))
    high = (1 << 31) - 1 if dtype == "int32" else (1 << 40)
    if form == "dict_keys":
        return [int(v) for v in rng.choice(1 << 20, size=length, replace=False)]
    return [int(v) for v in rng.integers(0, high, size=length)]


def value_form(values: list, form: str, dtype: str, by_reference: bool) -> Any:
    """``values`` in the caller's form. An ndarray goes to a ``StagedWriteTensor`` that stages
    arrays by reference (0.34.0 on, rope.py ``prefill_positions[i].numpy()``); an earlier one got
    the 0.33.0 caller's ``.tolist()``."""
    if form == "list":
        return list(values)
    if form == "tuple":
        return tuple(values)
    if form == "range":
        return range(values[0], values[0] + len(values)) if values else range(0)
    if form == "dict_keys":
        return dict.fromkeys(values, 0.0).keys()
    if form == "dict_values":
        return dict(enumerate(values)).values()
    if form == "array":
        return array.array(TYPECODES[dtype], values)
    if form == "ndarray":
        arr = np.asarray(values, dtype=np.float64 if dtype == "float32" else np.int64)
        return arr if by_reference else arr.tolist()
    raise HarnessError(f"unknown value form {form!r}")


@dataclass(frozen=True)
class SideSupport:
    """What both sides' buffer_utils.py support (module docstring): true unless a side is known to lack it."""

    fallback: bool = True  # NonUvaBuffer, for a platform without UVA (0.30.0 on)
    grows: bool = True  # UvaBufferPool.copy_to_uva grows a slot past the pool's size (0.30.0 on)


def has_fallback(impl: Impl) -> bool:
    """Whether the side's module defines ``NonUvaBuffer`` (``UvaBufferPool.__init__``'s fallback)."""
    return hasattr(impl.module, "NonUvaBuffer")


def pool_grows(impl: Impl) -> bool:
    """Whether the side's ``UvaBufferPool`` replaces a slot too small for ``x`` (``self._uva_bufs[self._curr] =
    buf``: 0.30.0's ``copy_to_uva``, 0.34.0's ``_next_buf``); True when its source cannot be read (a difference
    then shows)."""
    try:
        source = inspect.getsource(impl.module.UvaBufferPool)
    except (AttributeError, OSError, TypeError):
        return True
    return "self._uva_bufs[self._curr] = buf" in " ".join(source.split())


def side_support(impls: Mapping[str, Impl]) -> SideSupport:
    """What every side of the run supports (``for_sides``). Only a side rebuilt from a source is judged: the
    copies (0.33.0, 0.34.0) have both, and a planted edit of one must never narrow what is drawn."""
    rebuilt = [impl for impl in impls.values() if hasattr(impl.module, FORM_ATTRIBUTE)]
    return SideSupport(fallback=all(has_fallback(impl) for impl in rebuilt),
                       grows=all(pool_grows(impl) for impl in rebuilt))


def refuse_unsupported(spec: dict, impl: Impl) -> None:
    """A saved spec asking a side for the fallback it does not have: an input it cannot take."""
    if not spec["uva"] and not has_fallback(impl):
        raise HarnessError(f"{impl.path}: this side has no NonUvaBuffer (vllm before 0.30.0), so it cannot build "
                           "buffers on a platform without UVA (spec uva False); its UvaBuffer raises there")


@contextmanager
def platform(module: Any, uva: bool, device: str) -> Iterator[None]:
    """Build and use buffers as on a platform with (``uva``) or without UVA, for ``device``: the side
    module's ``is_uva_available`` (a name buffer_utils.py imports, the copies' stand-in or vllm's) answers
    ``uva`` inside (``UvaBufferPool`` picks its buffer class once, in ``__init__``). A CPU run pins nothing,
    as on vllm's CPU platform, even where CUDA is present: a pinned buffer's UVA view is a CUDA tensor, and a
    CPU run's thunk does not wait for the GPU reading it (the H100 run of 2026-12-06d: every CPU example of
    these targets raced its own clone of the view)."""
    saved = {name: getattr(module, name) for name in ("is_uva_available", "is_pin_memory_available", "PIN_MEMORY")
             if hasattr(module, name)}
    module.is_uva_available = lambda: uva
    if torch.device(device).type != "cuda":
        if "is_pin_memory_available" in saved:
            module.is_pin_memory_available = lambda: False
        if "PIN_MEMORY" in saved:
            module.PIN_MEMORY = False
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def engine_wait(device: str) -> None:
    """The engine's wait on a step's output before the step after next (module docstring)."""
    if torch.device(device).type == "cuda":
        with consumer_reads():
            torch.cuda.current_stream().synchronize()
        engine_waited()  # under the race oracle: the next step is held behind a sleep again


@functools.lru_cache(maxsize=None)  # built once: strategies/common.py says why
def _lengths(cols: int) -> st.SearchStrategy[int]:
    """How many values a write stages into a row of ``cols``: 0 (an empty list: append_block_ids
    with no new block) up to the whole row."""
    return st.integers(0, cols)


COLS = st.integers(1, 12) | st.just(LONG_ROW)
ROWS = st.integers(1, 6)
SEEDS = st.integers(0, 2**31 - 1)


@st.composite
def _staged_write_specs(draw: st.DrawFn, available: Sequence[str], contract: str,
                        support: SideSupport = SideSupport()) -> dict:
    wide = contract == "wide"
    dtype = draw(choice_of(("int32", "int64", "float32") if wide else ("int32", "int32", "float32")))
    rows = draw(ROWS)
    two_d = draw(st.integers(0, 3)) > 0  # most callers stage rows (1-D: states.py's lengths)
    cols = draw(COLS) if two_d else None
    forms = (WIDE_FORMS if wide else CALLER_FORMS)[dtype]
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        writes = []
        for row in draw(st.permutations(range(rows)))[: draw(st.integers(0, min(rows, 4)))]:
            if cols is None or (wide and draw(st.integers(0, 4)) == 0):  # stage_write_elem: 1-D callers; 2-D wide
                writes.append({"op": "elem", "index": row, "seed": draw(SEEDS)})
                continue
            start = draw(st.integers(0, cols - 1))
            length = draw(_lengths(cols - start))
            form = draw(choice_of(forms))
            writes.append({"op": "write", "index": row, "start": start, "form": form,
                           "len": length, "seed": draw(SEEDS)})
        steps.append(writes)
    return {
        "device": draw(devices(available)),
        "dtype": dtype,
        "rows": rows,
        "cols": cols,
        "uva_instead_of_gpu": draw(st.booleans()),
        "uva": draw(st.booleans()) if support.fallback else True,
        "max_concurrency": draw(choice_of((None, 2, 3))) if wide else None,
        "steps": steps,
    }


def elem_value(dtype: str, seed: int) -> int | float:
    """The value of a ``stage_write_elem`` (a length, a count: an int; cast to a float32 tensor)."""
    return int(np.random.default_rng(seed).integers(0, 1 << 20))


def expected_steps(spec: dict) -> list[torch.Tensor]:
    """The tensor after each step's ``apply_write``, from the spec alone: zeros, then each staged
    write's values cast to the dtype at ``[index, start:start + len]`` (``stage_write_elem``: column 0)."""
    shape = (spec["rows"],) if spec["cols"] is None else (spec["rows"], spec["cols"])
    state = torch.zeros(shape, dtype=DTYPES[spec["dtype"]])
    snapshots = []
    for writes in spec["steps"]:
        for w in writes:
            if w["op"] == "elem":
                value = torch.tensor([elem_value(spec["dtype"], w["seed"])], dtype=state.dtype)
                if state.dim() == 1:
                    state[w["index"]] = value[0]
                else:
                    state[w["index"], 0] = value[0]
            elif w["len"]:
                values = staged_values(spec["dtype"], w["form"], w["len"], w["seed"])
                state[w["index"], w["start"]: w["start"] + w["len"]] = torch.tensor(values, dtype=state.dtype)
        snapshots.append(state.clone())
    return snapshots


class StagedWriteInputs:
    """A ``StagedWriteTensor`` of the side, zeroed, then the spec's steps: stage each write, then
    ``apply_write()``. The thunk returns ``{"steps": [the tensor after each step], "gpu": the
    tensor at the end, "pending": writes still staged}``: all a caller can observe (the runner's
    kernels read ``.gpu``; FusedStagedWriter reads the staged lists)."""

    def __init__(self, support: SideSupport = SideSupport()) -> None:
        self.support = support

    def for_sides(self, impls: Mapping[str, Impl]) -> StagedWriteInputs:
        """This model drawing only what both sides support (module docstring)."""
        return StagedWriteInputs(side_support(impls))

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _staged_write_specs(available, contract, self.support)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        cls = impl.owner
        dtype = DTYPES[spec["dtype"]]
        size = spec["rows"] if spec["cols"] is None else (spec["rows"], spec["cols"])
        refuse_unsupported(spec, impl)
        with platform(impl.module, spec["uva"], spec["device"]):
            tensor = cls(size, dtype, torch.device(spec["device"]), max_concurrency=spec["max_concurrency"],
                         uva_instead_of_gpu=spec["uva_instead_of_gpu"])
        by_reference = hasattr(cls, "_staged_chunks")  # 0.34.0 on: arrays staged by reference
        steps = []
        for writes in spec["steps"]:
            calls = []
            for w in writes:
                if w["op"] == "elem":
                    calls.append(("elem", w["index"], elem_value(spec["dtype"], w["seed"])))
                else:
                    values = staged_values(spec["dtype"], w["form"], w["len"], w["seed"])
                    calls.append(("write", w["index"], w["start"],
                                  value_form(values, w["form"], spec["dtype"], by_reference)))
            steps.append(calls)
        apply_write, device = impl.function, spec["device"]

        def call() -> dict[str, Any]:
            with platform(impl.module, spec["uva"], device):
                return run_steps()

        def run_steps() -> dict[str, Any]:
            snapshots = []
            for i, calls in enumerate(steps):
                if i:
                    engine_wait(device)
                for c in calls:
                    if c[0] == "elem":
                        tensor.stage_write_elem(c[1], c[2])
                    else:
                        tensor.stage_write(c[1], c[2], c[3])
                apply_write(tensor)
                snapshots.append(tensor.gpu.clone())
            return {"steps": snapshots, "gpu": tensor.gpu, "pending": len(tensor._staged_write_indices)}

        return call


# ---- uva-buffer-pool-copy-to-uva -------------------------------------------------------------

POOL_FORMS_CALLER = ("list", "ndarray")
POOL_FORMS_WIDE = ("list", "ndarray", "tensor")


@st.composite
def _pool_specs(draw: st.DrawFn, available: Sequence[str], contract: str,
                support: SideSupport = SideSupport()) -> dict:
    wide = contract == "wide"
    dtype = draw(choice_of(("int32", "int64", "float32")))
    size = draw(st.integers(1, 6))
    inner = draw(st.lists(st.integers(1, 3), max_size=1))
    calls = []
    for _ in range(draw(st.integers(1, 6))):
        form = draw(choice_of(POOL_FORMS_WIDE if wide else POOL_FORMS_CALLER))
        # Lists (StagedWriteTensor's staged ints) go to 1-D pools only: the pool is 2-D only when
        # no call passes a list (below). n up to the pool's size (UvaBackedTensor.np[:n]) and past
        # it (the staged lists; the contents pool of size 1): the slot grows -- where both sides grow one.
        calls.append({"form": form, "n": draw(st.integers(0, size * 3 if support.grows else size)),
                      "seed": draw(SEEDS)})
    return {
        "device": draw(devices(available)),
        "dtype": dtype,
        "size": [size, *inner] if inner and all(c["form"] != "list" for c in calls) else size,
        "uva": draw(st.booleans()) if support.fallback else True,
        "max_concurrency": draw(choice_of((None, 2, 3))) if wide else None,
        "calls": calls,
    }


def pool_values(spec: dict, call: dict) -> np.ndarray:
    """The host data of one ``copy_to_uva`` call (shape ``[n, *inner]`` of the pool's row shape)."""
    inner = [] if isinstance(spec["size"], int) else list(spec["size"][1:])
    rng = np.random.default_rng(call["seed"])
    shape = (call["n"], *inner)
    if spec["dtype"] == "float32":
        return (rng.standard_normal(shape) * 100).astype(np.float32)
    return rng.integers(0, 1 << 30, size=shape).astype(np.int32 if spec["dtype"] == "int32" else np.int64)


def _pool_input(values: np.ndarray, form: str) -> Any:
    if form == "list":
        return values.tolist()
    if form == "tensor":
        return torch.from_numpy(values.copy())
    return values.copy()


def max_concurrency_of(spec: dict) -> int:
    """The pool's depth: the drawn one, else vllm's default of 2 (_DEFAULT_MAX_CONCURRENCY)."""
    return spec["max_concurrency"] or 2


class PoolInputs:
    """A ``UvaBufferPool`` of the side and the spec's ``copy_to_uva`` calls. The thunk returns
    ``{"returned": [each call's view, read right after it], "live": [the views of the last
    max_concurrency calls, read again at the end]}``: the pool's promise is that a view stays
    intact until its slot comes round again (``_DEFAULT_MAX_CONCURRENCY``: "Must be >= the
    number of concurrent in-flight steps")."""

    def __init__(self, support: SideSupport = SideSupport()) -> None:
        self.support = support

    def for_sides(self, impls: Mapping[str, Impl]) -> PoolInputs:
        """This model drawing only what both sides support (module docstring)."""
        return PoolInputs(side_support(impls))

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _pool_specs(available, contract, self.support)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        refuse_unsupported(spec, impl)
        with platform(impl.module, spec["uva"], spec["device"]):
            pool = impl.owner(spec["size"], DTYPES[spec["dtype"]], spec["max_concurrency"])
        inputs = [_pool_input(pool_values(spec, c), c["form"]) for c in spec["calls"]]
        copy_to_uva, device, depth = impl.function, spec["device"], max_concurrency_of(spec)

        def call() -> dict[str, Any]:
            with platform(impl.module, spec["uva"], device):
                return run_calls()

        def run_calls() -> dict[str, Any]:
            views, returned = [], []
            for i, x in enumerate(inputs):
                if i:
                    engine_wait(device)
                view = copy_to_uva(pool, x)
                views.append(view)
                returned.append(view.clone())
            return {"returned": returned, "live": [v.clone() for v in views[-depth:]]}

        return call


# ---- fused-staged-writer-apply ---------------------------------------------------------------

FUSED_FORMS_CALLER = ("list",)  # block_table.py:append_block_ids: block_ids (or [0] * len) lists
FUSED_FORMS_WIDE = ("list", "tuple", "range", "array")


@st.composite
def _fused_specs(draw: st.DrawFn, available: Sequence[str], contract: str,
                 support: SideSupport = SideSupport()) -> dict:
    """BlockTables with 2-3 KV cache groups (block_table.py: the fused writer exists only then), each
    an int32 StagedWriteTensor (max_num_reqs, max_num_blocks of the group); per step, each group's
    writes go to distinct requests, ``start`` the blocks the row holds so far (any, on overwrite 0),
    ending within the row (append_block_ids raises before an overflowing write)."""
    forms = FUSED_FORMS_WIDE if contract == "wide" else FUSED_FORMS_CALLER
    rows = draw(ROWS)
    cols = [draw(COLS) for _ in range(draw(st.integers(2, 3)))]
    steps = []
    for _ in range(draw(st.integers(1, 3))):
        writes = []
        for group, width in enumerate(cols):
            for row in draw(st.permutations(range(rows)))[: draw(st.integers(0, min(rows, 3)))]:
                start = draw(st.integers(0, width - 1))
                writes.append({"group": group, "index": row, "start": start, "form": draw(choice_of(forms)),
                               "len": draw(_lengths(width - start)), "seed": draw(SEEDS)})
        steps.append(writes)
    return {"device": draw(devices(available)), "rows": rows, "cols": cols,
            "uva": draw(st.booleans()) if support.fallback else True, "steps": steps}


def group_spec(spec: dict, group: int) -> dict:
    """One group's table as a staged-write spec (int32, its writes of each step), for the oracles."""
    return {"device": spec["device"], "dtype": "int32", "rows": spec["rows"], "cols": spec["cols"][group],
            "steps": [[{**w, "op": "write"} for w in step if w["group"] == group] for step in spec["steps"]]}


class FusedInputs:
    """The side's ``FusedStagedWriter(device, num_groups * max_num_reqs)`` and one ``StagedWriteTensor``
    per group (block_table.py:BlockTables.__init__), the pointer and stride tensors made as
    ``init_block_table_layout_tensors`` makes them; each step stages the writes (append_block_ids)
    then calls ``apply(block_tables, block_table_ptrs, block_table_strides)`` (apply_staged_writes).
    The thunk returns ``{"steps": [[each group's table] after each step], "gpu": [the tables at the
    end], "pending": writes still staged over all groups}``."""

    def __init__(self, support: SideSupport = SideSupport()) -> None:
        self.support = support

    def for_sides(self, impls: Mapping[str, Impl]) -> FusedInputs:
        """This model drawing only what both sides support (module docstring)."""
        return FusedInputs(side_support(impls))

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _fused_specs(available, contract, self.support)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        device = torch.device(spec["device"])
        refuse_unsupported(spec, impl)
        with platform(impl.module, spec["uva"], spec["device"]):
            tensors = [impl.module.StagedWriteTensor((spec["rows"], width), dtype=torch.int32, device=device)
                       for width in spec["cols"]]
            writer = impl.owner(device, len(tensors) * spec["rows"])
        ptrs = torch.tensor([t.gpu.data_ptr() for t in tensors], dtype=torch.uint64, device=device)
        strides = torch.tensor([t.gpu.stride(0) for t in tensors], dtype=torch.int64, device=device)
        steps = [[(w["group"], w["index"], w["start"],
                   value_form(staged_values("int32", w["form"], w["len"], w["seed"]), w["form"], "int32", False))
                  for w in writes] for writes in spec["steps"]]
        apply = impl.function

        def call() -> dict[str, Any]:
            with platform(impl.module, spec["uva"], spec["device"]):
                return run_steps()

        def run_steps() -> dict[str, Any]:
            snapshots = []
            for i, writes in enumerate(steps):
                if i:
                    engine_wait(spec["device"])
                for group, index, start, values in writes:
                    tensors[group].stage_write(index, start, values)
                apply(writer, tensors, ptrs, strides)
                snapshots.append([t.gpu.clone() for t in tensors])
            return {"steps": snapshots, "gpu": [t.gpu for t in tensors],
                    "pending": sum(len(t._staged_write_indices) for t in tensors)}

        return call
