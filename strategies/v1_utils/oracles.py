"""Oracles of ``CpuGpuBuffer.copy_to_gpu(n=None)`` (vllm/v1/utils.py, 0.29.0 / 0.30.0).

``CpuGpuBuffer``: "Buffer to easily copy tensors between CPU and GPU." The v1
model runner fills the host rows in use and calls ``copy_to_gpu(n)`` with their
count (``None``: the whole buffer); the device rows past ``n`` still hold the
previous step's data and are read by nobody this step, so a copy must leave
them alone, and it never writes the host side. The returned tensor is the
device rows just written (``-> torch.Tensor``; the runner passes it on, e.g.
``self.input_ids.copy_to_gpu(total_num_scheduled_tokens)``).

The thunk (strategies/v1_utils/inputs.py) returns ``{"returned", "gpu", "cpu"}``: what
``copy_to_gpu`` returned, the device buffer after the call and a clone of the
host buffer; the host rows were drawn from ``seed``, the stale device rows from
``stale_seed``.

Consumers: the returned rows and ``buf.gpu`` go to the model's kernels (input
ids, positions, slot mappings) on the device; nothing reads them on the host,
so the target declares no consumer.
"""

from __future__ import annotations

from typing import Any

import torch

from strategies.v1_utils.inputs import seeded_buffer_values


def _rows(spec: dict) -> int | None:
    """How many leading rows ``copy_to_gpu(n)`` copies: all for ``None``, ``n``
    clamped to the buffer; None for a negative ``n`` (wide contract: a slice from
    the end, which no caller asks for and the docstring does not define)."""
    n, total = spec["n"], spec["size"][0]
    if n is None:
        return total
    if n < 0:
        return None
    return min(n, total)


def _parts(output: Any) -> tuple[dict[str, torch.Tensor], str | None]:
    if not isinstance(output, dict) or not {"returned", "gpu", "cpu"} <= set(output):
        return {}, f"output is {type(output).__name__} without returned/gpu/cpu"
    for key in ("returned", "gpu", "cpu"):
        if not isinstance(output[key], torch.Tensor):
            return {}, f"output[{key!r}] is a {type(output[key]).__name__}, not a tensor"
    return {k: output[k].detach().cpu() for k in ("returned", "gpu", "cpu")}, None


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two equally shaped tensors first differ (called only when they do)."""
    where = tuple((got != want).nonzero()[0].tolist())
    return f"at {where}: {got[where].item()} instead of {want[where].item()}"


def copy_to_gpu_copies_the_rows_in_use(spec: dict, output: Any) -> str | None:
    """After ``copy_to_gpu(n)`` the first ``n`` device rows equal the host rows
    (``gpu[:n] == cpu[:n]``) and every later device row still holds what it held."""
    rows = _rows(spec)
    parts, problem = _parts(output)
    if problem:
        return problem
    if rows is None:
        return None
    gpu = parts["gpu"]
    host = seeded_buffer_values(spec["size"], spec["dtype"], spec["seed"])
    stale = seeded_buffer_values(spec["size"], spec["dtype"], spec["stale_seed"])
    if gpu.shape != host.shape or gpu.dtype != host.dtype:
        return f"device buffer is {tuple(gpu.shape)} {gpu.dtype}, allocated {tuple(host.shape)} {host.dtype}"
    if not torch.equal(gpu[:rows], host[:rows]):
        return f"copy_to_gpu({spec['n']}): device rows [:{rows}] differ from the host rows " + \
            _first_difference(gpu[:rows], host[:rows])
    if not torch.equal(gpu[rows:], stale[rows:]):
        return f"copy_to_gpu({spec['n']}): device rows [{rows}:] past the copy changed " + \
            _first_difference(gpu[rows:], stale[rows:])
    return None


def copy_to_gpu_returns_the_copied_rows(spec: dict, output: Any) -> str | None:
    """The returned tensor is the device rows written: ``n`` rows (all for ``None``)
    of the buffer's shape and dtype, on the device, equal to the host rows."""
    rows = _rows(spec)
    parts, problem = _parts(output)
    if problem:
        return problem
    if rows is None:
        return None
    returned = parts["returned"]
    want_shape = (rows, *spec["size"][1:])
    if tuple(returned.shape) != want_shape:
        return f"copy_to_gpu({spec['n']}) returned shape {tuple(returned.shape)}, expected {want_shape}"
    if output["returned"].device.type != torch.device(spec["device"]).type:
        return f"copy_to_gpu returned a tensor on {output['returned'].device}, not on {spec['device']}"
    host = seeded_buffer_values(spec["size"], spec["dtype"], spec["seed"])
    if returned.dtype != host.dtype or not torch.equal(returned, host[:rows]):
        return f"copy_to_gpu({spec['n']}) returned values that are not the host rows [:{rows}]"
    return None


def copy_to_gpu_leaves_the_host_alone(spec: dict, output: Any) -> str | None:
    """The host buffer is only read: after the call it still holds the rows the
    runner wrote (for every ``n``, negative ones included)."""
    parts, problem = _parts(output)
    if problem:
        return problem
    host = seeded_buffer_values(spec["size"], spec["dtype"], spec["seed"])
    if parts["cpu"].shape != host.shape or not torch.equal(parts["cpu"], host):
        return "copy_to_gpu changed the host buffer"
    return None
