"""Planted bugs and benign refactors of the torch_utils targets, collected by tests/planted (fuzz/plants.py).

From fla_glm4: Planted bugs and benign refactors for the FLA index helpers and glm4_1v.

From layout: Planted layout changes: the same values in another memory layout.

Only a target that declares ``Comparison(layout=True)`` reports them
(docs/verdicts.md#layout). ``BUGS`` show under the caller contract;
``WIDE_BUGS`` only on inputs the caller model never draws (2-D data for
``async_tensor_h2d``), so tests/e2e/test_layout.py fuzzes them under ``wide``.

From shared_fla_glm4: Bugs planted in both copies at once: the FLA index helpers, glm4_1v, async_tensor_h2d
and CpuGpuBuffer.copy_to_gpu.

The differential check cannot see them (legacy and optimized share the slip);
the invariants and references of strategies/fla_index/oracles.py, glm4_1v.py,
torch_utils.py and v1_utils.py must.
"""

from __future__ import annotations

from fuzz.api import Plant, SharedPlant

_H2D_RETURN = "return t.to(device=device, dtype=dtype, non_blocking=True)"


def _both(module: str, old: str, new: str) -> dict[str, tuple[str, str, str]]:
    """The same edit in each copy of ``module``: the line is shared text of both releases."""
    return {"legacy": (f"legacy.{module}", old, new), "optimized": (f"optimized.{module}", old, new)}


BUGS = [
    Plant("planted-shim-dropped-dtype", "async-tensor-h2d", "optimized.torch_utils",
          "return t.to(device=device, dtype=dtype, non_blocking=True)",
          "return t.to(device=device, non_blocking=True)",
          "a tensor or array keeps its own dtype when one is asked for"),
]

BENIGN = [
    Plant("benign-shim-keyword-order", "async-tensor-h2d", "optimized.torch_utils",
          "return t.to(device=device, dtype=dtype, non_blocking=True)",
          "return t.to(dtype=dtype, device=device, non_blocking=True)",
          "the same call, keywords reordered"),
]

SHARED_BUGS = [
    SharedPlant(
        name="shared-h2d-dropped-dtype",
        base_target="async-tensor-h2d",
        **_both("torch_utils", "return t.to(device=device, dtype=dtype, non_blocking=True)",
                "return t.to(device=device, non_blocking=True)"),
        why="a tensor or array source keeps its own dtype when another is asked for",
    ),
]

WIDE_BUGS = [
    Plant("planted-layout-shim-column-major", "async-tensor-h2d", "optimized.torch_utils",
          _H2D_RETURN,
          "out = t.to(device=device, dtype=dtype, non_blocking=True)\n"
          "    return out.t().contiguous().t() if out.dim() == 2 else out",
          "2-D data comes back column-major: same values, another layout for the caller's .view() or kernel"),
]


# ---- races and the copy policy (fuzz/oracles/races.py, copypolicy.py; CUDA only: on CPU no copy is asynchronous)

_FRESH_PINNED = '        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device="cpu")'
_ENQUEUE = "    return t.to(device=device, dtype=dtype, non_blocking=True)"

RACE_BUGS = [
    Plant("planted-race-h2d-shared-scratch", "async-tensor-h2d", "optimized.torch_utils", _FRESH_PINNED,
          '        fresh = torch.tensor(data, dtype=dtype, device="cpu")\n'
          '        scratch = async_tensor_h2d.__dict__.setdefault("scratch", {})\n'
          '        buf = scratch.get(fresh.dtype)\n'
          '        if buf is None or buf.numel() < fresh.numel():\n'
          '            buf = scratch[fresh.dtype] = torch.empty(max(fresh.numel(), 4096), dtype=fresh.dtype,\n'
          '                                                      pin_memory=PIN_MEMORY)\n'
          '        t = buf[: fresh.numel()].view(fresh.shape)\n'
          '        t.copy_(fresh)',
          "lists staged through one pinned scratch the next call rewrites while this call's copy may be pending "
          "(vLLM #24527, #31373): a staging buffer reused before its copy ran"),
    Plant("planted-race-h2d-staging-rewritten", "async-tensor-h2d", "optimized.torch_utils", _ENQUEUE,
          "    out = t.to(device=device, dtype=dtype, non_blocking=True)\n"
          "    if isinstance(data, list) and out.device.type != \"cpu\":\n"
          "        t.fill_(0)  # the staging tensor recycled at once, before the pending copy read it\n"
          "    return out",
          "the function rewrites its own pinned staging tensor right after enqueueing the copy from it"),
]

RACE_BENIGN = [
    Plant("benign-race-h2d-pinned-after-build", "async-tensor-h2d", "optimized.torch_utils", _FRESH_PINNED,
          '        t = torch.tensor(data, dtype=dtype, device="cpu")\n'
          "        t = t.pin_memory() if PIN_MEMORY else t",
          "a fresh pinned tensor per call, pinned after it is built: nothing the next call touches"),
]

POLICY_BUGS = [
    Plant("planted-policy-h2d-pageable-tensor", "async-tensor-h2d", "optimized.torch_utils",
          "        t = data.pin_memory() if PIN_MEMORY else data", "        t = data",
          "a pageable caller tensor copied non_blocking as it is: vLLM's CI copy check rejects it (not pinned)"),
    Plant("planted-policy-h2d-strided-staging", "async-tensor-h2d", "optimized.torch_utils", _FRESH_PINNED,
          '        t = torch.tensor(data, dtype=dtype, device="cpu")\n'
          '        if torch.device(device).type != "cpu":\n'
          "            gapped = torch.empty((*t.shape, 2), dtype=t.dtype, pin_memory=PIN_MEMORY)[..., 0]\n"
          "            t = gapped.copy_(t)",
          "pinned staging with a gap between elements: vLLM's CI copy check rejects it (not densely laid out)"),
]
