"""Oracles of the model runner's staging buffers (vllm/v1/worker/gpu/buffer_utils.py, 0.33.0 / 0.34.0).

``StagedWriteTensor``: ``stage_write(index, start, x)`` "Stage[s] writing `x` to row `index` from
column `start`" (0.34.0 docstring; ``stage_write_elem(index, x)``: one value at column 0) and
``apply_write()`` writes every staged diff to ``.gpu`` ("Write diffs to the GPU buffer") and clears the
stage ("Clear the staged writes"). A cell no write names keeps its value: the runner writes only the
rows of added requests, the rest of the table is live state. The thunk (strategies/buffer_utils/inputs.py)
returns ``{"steps": [.gpu after each step's apply_write], "gpu", "pending"}``.

``UvaBufferPool.copy_to_uva(x)``: copies ``x`` into the next round-robin slot ("CPU-to-CPU copy") and
returns a device view of its ``len(x)`` rows; a slot is reused only ``max_concurrency`` calls later
(``_DEFAULT_MAX_CONCURRENCY``: "Must be >= the number of concurrent in-flight steps"), so a view stays
intact until then. The thunk returns ``{"returned": [each view read right after its call], "live":
[the views of the last max_concurrency calls, read at the end]}``.

No consumer: both outputs are read by the runner's kernels on the device, never on the host.
"""

from __future__ import annotations

from typing import Any

import torch

from strategies.buffer_utils.inputs import DTYPES, expected_steps, group_spec, max_concurrency_of, pool_values


def _tensors(output: Any, key: str) -> tuple[list[torch.Tensor], str | None]:
    if not isinstance(output, dict) or key not in output:
        return [], f"output is {type(output).__name__} without {key!r}"
    values = output[key]
    if not isinstance(values, list) or not all(isinstance(v, torch.Tensor) for v in values):
        return [], f"output[{key!r}] is not a list of tensors"
    return [v.detach().cpu() for v in values], None


def _first_difference(got: torch.Tensor, want: torch.Tensor, mask: torch.Tensor) -> str:
    where = tuple(((got != want) & mask).nonzero()[0].tolist())
    return f"at {where}: {got[where].item()} instead of {want[where].item()}"


def _written(spec: dict, step: int) -> torch.Tensor:
    """The cells the writes of ``step`` name (a bool mask of the tensor's shape)."""
    shape = (spec["rows"],) if spec["cols"] is None else (spec["rows"], spec["cols"])
    mask = torch.zeros(shape, dtype=torch.bool)
    for w in spec["steps"][step]:
        if w["op"] == "elem":
            mask[(w["index"],) if spec["cols"] is None else (w["index"], 0)] = True
        else:
            mask[w["index"], w["start"]: w["start"] + w["len"]] = True
    return mask


def _snapshots(spec: dict, output: Any) -> tuple[list[torch.Tensor], list[torch.Tensor], str | None]:
    got, problem = _tensors(output, "steps")
    if problem:
        return [], [], problem
    want = expected_steps(spec)
    if len(got) != len(want):
        return [], [], f"{len(got)} step snapshots for {len(want)} steps"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return [], [], (f"after step {i} the tensor is {tuple(g.shape)} {g.dtype}, "
                            f"allocated {tuple(w.shape)} {w.dtype}")
    return got, want, None


def apply_write_writes_what_was_staged(spec: dict, output: Any) -> str | None:
    """After each step's ``apply_write()``, every cell a write of that step staged holds the staged
    value, cast to the tensor's dtype (``stage_write(index, start, x)``: ``x`` at ``[index, start:]``;
    ``stage_write_elem(index, v)``: ``v`` at column 0)."""
    got, want, problem = _snapshots(spec, output)
    if problem:
        return problem
    for i, (g, w) in enumerate(zip(got, want)):
        mask = _written(spec, i)
        if not torch.equal(g[mask], w[mask]):
            return f"step {i}: a staged cell does not hold its value " + _first_difference(g, w, mask)
    return None


def apply_write_leaves_other_cells_alone(spec: dict, output: Any) -> str | None:
    """A cell no write of the step names keeps what it held before the step (zeros before the first)."""
    got, want, problem = _snapshots(spec, output)
    if problem:
        return problem
    for i, (g, w) in enumerate(zip(got, want)):
        mask = ~_written(spec, i)
        if not torch.equal(g[mask], w[mask]):
            return f"step {i}: a cell no write named changed " + _first_difference(g, w, mask)
    return None


def apply_write_clears_the_stage(spec: dict, output: Any) -> str | None:
    """After ``apply_write()`` nothing stays staged ("Clear the staged writes"; FusedStagedWriter.apply
    reads ``_staged_write_indices`` of the same tensors), and ``.gpu`` at the end is the last step's."""
    if not isinstance(output, dict) or "pending" not in output or not isinstance(output.get("gpu"), torch.Tensor):
        return "output without pending/gpu"
    if output["pending"] != 0:
        return f"{output['pending']} writes still staged after apply_write"
    got, _, problem = _snapshots(spec, output)
    if problem:
        return problem
    if not torch.equal(output["gpu"].detach().cpu(), got[-1]):
        return ".gpu at the end differs from the tensor after the last apply_write"
    return None


def _pool_expected(spec: dict) -> list[torch.Tensor]:
    return [torch.from_numpy(pool_values(spec, c)).to(DTYPES[spec["dtype"]]) for c in spec["calls"]]


def copy_to_uva_returns_the_data(spec: dict, output: Any) -> str | None:
    """Each ``copy_to_uva(x)`` returns a view of ``len(x)`` rows holding ``x`` in the pool's dtype."""
    got, problem = _tensors(output, "returned")
    if problem:
        return problem
    want = _pool_expected(spec)
    if len(got) != len(want):
        return f"{len(got)} views for {len(want)} calls"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"call {i}: view is {tuple(g.shape)} {g.dtype}, expected {tuple(w.shape)} {w.dtype}"
        if not torch.equal(g, w):
            everywhere = torch.ones_like(g, dtype=torch.bool)
            return f"call {i}: the view does not hold x " + _first_difference(g, w, everywhere)
    return None


def views_survive_until_their_slot_returns(spec: dict, output: Any) -> str | None:
    """The views of the last ``max_concurrency`` calls still hold their data after the last call:
    a slot is rewritten only when the round robin comes back to it (the race of a reused host
    buffer overwritten before its reader ran: vLLM #24527, #25279, #28706, #31373, #31841)."""
    got, problem = _tensors(output, "live")
    if problem:
        return problem
    want = _pool_expected(spec)[-max_concurrency_of(spec):]
    if len(got) != len(want):
        return f"{len(got)} live views for the last {len(want)} calls"
    for back, (g, w) in enumerate(zip(reversed(got), reversed(want))):
        if g.shape != w.shape or not torch.equal(g, w.to(g.dtype)):
            return f"the view returned {back} call(s) before the last was overwritten by a later call"
    return None


# ---- FusedStagedWriter.apply: "Apply and clear the staged writes of `tensors` with one kernel." -----
# The same promises as each tensor's own apply_write, per KV cache group: checked group by group.


def _per_group(spec: dict, output: Any, invariant: Any) -> str | None:
    if not isinstance(output, dict) or not {"steps", "gpu", "pending"} <= set(output):
        return f"output is {type(output).__name__} without steps/gpu/pending"
    groups = len(spec["cols"])
    if any(not isinstance(s, list) or len(s) != groups for s in output["steps"]) or len(output["gpu"]) != groups:
        return f"the output does not hold {groups} group tables per step"
    for group in range(groups):
        view = {"steps": [s[group] for s in output["steps"]], "gpu": output["gpu"][group],
                "pending": output["pending"]}
        problem = invariant(group_spec(spec, group), view)
        if problem:
            return f"group {group}: {problem}"
    return None


def fused_apply_writes_what_was_staged(spec: dict, output: Any) -> str | None:
    """After each step's ``apply``, every cell a write staged in a group's tensor holds its value."""
    return _per_group(spec, output, apply_write_writes_what_was_staged)


def fused_apply_leaves_other_cells_alone(spec: dict, output: Any) -> str | None:
    """A cell of any group no write of the step names keeps its value (another group's write included)."""
    return _per_group(spec, output, apply_write_leaves_other_cells_alone)


def fused_apply_clears_the_stage(spec: dict, output: Any) -> str | None:
    """After ``apply`` no tensor has writes staged ("Apply and clear")."""
    return _per_group(spec, output, apply_write_clears_the_stage)
