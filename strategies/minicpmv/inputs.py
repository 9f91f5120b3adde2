"""Inputs of ``Resampler2_5.forward(x, tgt_sizes)`` (vllm/model_executor/models/minicpmv.py), the perceiver
resampler of MiniCPM-V 2.5 / 2.6 / 4.0 (and, through ``Resampler4_5``, 4.5), on a tiny seeded module.

Callers (vllm 0.34.0, the same text as 0.30.0's), each with ``x`` the vision tower's output ``(B, L, kv_dim)``
on the model's device and ``tgt_sizes`` ``(B, 2)`` integer patch rows and columns per slice:

* ``MiniCPMV2_5.get_vision_hidden_states`` (minicpmv.py:2094), ``MiniCPMV2_6.get_vision_hidden_states``
  (:2191), ``MiniCPMV4_0.get_vision_hidden_states`` (:2291; ``MiniCPMV4_5`` at :2391 passes temporal ids to
  ``Resampler4_5``): ``tgt_sizes = data["tgt_sizes"]``, a ``keep_on_cpu=True`` field (:504), so it stays on the
  host and 0.30.0's forward pinned-copies it (``async_tensor_h2d``); ``vision_embedding = self.vpm(...)``
  padded to ``max_patches = num_patches.max().item()`` (:2109) -- so ``L`` is exactly the largest ``h * w``;
  ``self.resampler(vision_embedding, tgt_sizes)``;
* ``_MiniCPMVEncoderCudaGraphMixin.encoder_cudagraph_forward`` (:1885): ``tgt_sizes`` is the graph's device
  buffer (``dummy_tgt_sizes`` at capture, :1830, ``async_tensor_h2d(tgt_sizes_raw, device, dtype=torch.long)``
  at replay, :1872), ``x`` padded to the bucket's ``max_patches``. Its eager warm-up run (before capture) is the
  form drawn here with ``tgt_on == "device"``: the forward then reads the sizes back for ``_adjust_pos_cache``.

The resampler is built as ``init_resampler`` builds it (:2075, :2171): ``Resampler2_5(num_queries=query_num,
embed_dim, num_heads=embed_dim // 128, kv_dim=vision_dim)``, default ``max_size=(70, 70)``; here with
``embed_dim`` 8 or 16, 1 or 2 heads and ``kv_dim != embed_dim`` (the ``ReplicatedLinear`` path). Slices hold at
most about 32 x 32 patches (448-pixel slices of 14-pixel patches), but an elongated image keeps its aspect ratio:
some batches have a side past 70 patches (``_adjust_pos_cache`` grows the cache).

Not drawn: ``L`` larger than the largest ``h * w`` (only the CUDA graph path pads ``x`` to a bucket): 0.29.0's
forward sizes its mask and positional embedding from ``patch_len.max()`` and fails on such ``x``, so no
agreement can be asked of it (tests/unit/test_minicpmv.py checks the 0.30.0 copy against the reference on it);
a slice with no patch (upstream slices are never empty; a fully masked row makes attention NaN on both sides);
CUDA graph capture itself (``torch.cuda.is_current_stream_capturing()``).

The wide contract adds what 0.29.0 also took: a small pos cache (``max_size`` 1..6, so most batches grow it),
``kv_dim == embed_dim`` (the identity ``kv_proj``), int32 sizes, sizes on the device.

A spec is JSON: ``images`` (``[h, w]`` per slice), ``embed_dim``, ``num_heads``, ``kv_dim``, ``num_queries``,
``max_size``, ``dtype``, ``tgt_on`` ("cpu" or "device"), ``tgt_dtype``, ``seed``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from hypothesis import strategies as st

from fuzz.api import HarnessError, Impl
from strategies.common import INT_DTYPES, choice_of, devices, float_dtypes, int_dtypes, seeded_floats

CALLER_MAX_SIZE = (70, 70)  # Resampler2_5's default, which every init_resampler keeps
EMBED_DIMS = choice_of([8, 16])
HEADS = choice_of([1, 2])
KV_DIMS = choice_of([4, 12])
QUERIES = st.integers(1, 3)
COUNTS = st.integers(1, 3)
PLACES = choice_of(["cpu", "device"])
SMALL_SIDES = st.integers(1, 6)
# An elongated image: one side past the 70-patch cache, the other 1 or 2 patches (about 448^2 pixels in all).
LONG_SIDES, SHORT_SIDES = st.integers(71, 76), st.integers(1, 2)
WIDE_SIDES = st.integers(1, 9)
WIDE_CACHE = st.integers(1, 6)
SEEDS = st.integers(1, 2**31 - 1)


@st.composite
def _caller_image(draw: st.DrawFn) -> list[int]:
    """``[h, w]`` patches of one slice: mostly small, one batch in eight with an elongated image."""
    if draw(st.integers(0, 7)) == 0:
        long, short = draw(LONG_SIDES), draw(SHORT_SIDES)
        return [long, short] if draw(st.booleans()) else [short, long]
    return [draw(SMALL_SIDES), draw(SMALL_SIDES)]


@st.composite
def _resampler_specs(draw: st.DrawFn, available: Sequence[str], contract: str) -> dict:
    wide = contract == "wide"
    embed_dim = draw(EMBED_DIMS)
    count = draw(COUNTS)
    if wide:
        images = [[draw(WIDE_SIDES), draw(WIDE_SIDES)] for _ in range(count)]
        max_size = [draw(WIDE_CACHE), draw(WIDE_CACHE)]
        kv_dim = draw(choice_of([embed_dim, 4, 12]))
    else:
        images = [draw(_caller_image()) for _ in range(count)]
        max_size = list(CALLER_MAX_SIZE)
        kv_dim = draw(KV_DIMS)
    return {
        "device": draw(devices(available)),
        "images": images,
        "embed_dim": embed_dim,
        "num_heads": draw(HEADS),
        "kv_dim": kv_dim,
        "num_queries": draw(QUERIES),
        "max_size": max_size,
        "dtype": draw(float_dtypes()),
        "tgt_on": draw(PLACES),
        "tgt_dtype": draw(int_dtypes()) if wide else "int64",
        "seed": draw(SEEDS),
    }


def longest_of(spec: dict) -> int:
    """``L``: the callers pad ``x`` to the largest slice's patch count (``num_patches.max()``)."""
    return max(h * w for h, w in spec["images"])


def x_of(spec: dict, length: int | None = None) -> torch.Tensor:
    """The vision tower's output ``(B, L, kv_dim)`` on the spec's device; rows past each slice's ``h * w``
    hold data too (the tower's output at padded positions is not zero), which the mask must hide."""
    length = longest_of(spec) if length is None else length
    shape = (len(spec["images"]), length, spec["kv_dim"])
    return seeded_floats(shape, spec["dtype"], spec["seed"], spec["device"])


def tgt_sizes_of(spec: dict) -> torch.Tensor:
    """``tgt_sizes`` ``(B, 2)`` where the spec puts it: the host (eager callers) or the device (graph buffer)."""
    sizes = torch.tensor(spec["images"], dtype=INT_DTYPES[spec["tgt_dtype"]])
    return sizes.to(spec["device"]) if spec["tgt_on"] == "device" else sizes


def parameter_values(spec: dict) -> dict[str, torch.Tensor]:
    """Seeded values (on the CPU, in the spec's dtype) for every parameter of the resampler, by name; the
    reference (strategies/minicpmv/oracles.py) reads the same ones. ``proj`` is scaled by ``embed_dim**-0.5``
    as upstream initialises it, so outputs stay of order one; layer-norm weights are 1 + noise."""
    d, kv, q = spec["embed_dim"], spec["kv_dim"], spec["num_queries"]
    shapes = {
        "query": (q, d),
        "attn.in_proj_weight": (3 * d, d),
        "attn.in_proj_bias": (3 * d,),
        "attn.out_proj.weight": (d, d),
        "attn.out_proj.bias": (d,),
        "ln_q.weight": (d,), "ln_q.bias": (d,),
        "ln_kv.weight": (d,), "ln_kv.bias": (d,),
        "ln_post.weight": (d,), "ln_post.bias": (d,),
        "proj": (d, d),
    }
    if kv != d:
        shapes["kv_proj.weight"] = (d, kv)
    values = {}
    for index, (name, shape) in enumerate(sorted(shapes.items())):
        value = seeded_floats(shape, "float32", spec["seed"] + 1 + index, "cpu")
        if name == "proj" or name.endswith("proj_weight") or name.endswith("proj.weight"):
            value = value * shape[-1] ** -0.5
        if name.startswith("ln_") and name.endswith(".weight"):
            value = 1.0 + 0.1 * value
        values[name] = value.to(getattr(torch, spec["dtype"]))
    return values


def resampler_of(side_module: Any, spec: dict) -> torch.nn.Module:
    """The side's own ``Resampler2_5`` with the spec's tiny config, seeded weights, on the spec's device and
    dtype (as ``init_resampler`` leaves it: ``resampler.to(dtype=...)``, then the model moves to its device)."""
    if spec["embed_dim"] % 4 or spec["embed_dim"] % spec["num_heads"]:
        raise HarnessError(f"embed_dim {spec['embed_dim']} must be a multiple of 4 and of num_heads")
    resampler = side_module.Resampler2_5(
        num_queries=spec["num_queries"], embed_dim=spec["embed_dim"], num_heads=spec["num_heads"],
        kv_dim=spec["kv_dim"], max_size=tuple(spec["max_size"]))
    values = parameter_values(spec)
    parameters = dict(resampler.named_parameters())
    if set(parameters) != set(values):
        raise HarnessError(f"resampler parameters {sorted(parameters)} are not the seeded {sorted(values)}")
    resampler = resampler.to(dtype=getattr(torch, spec["dtype"]))
    with torch.no_grad():
        for name, parameter in resampler.named_parameters():
            parameter.copy_(values[name])
    return resampler.to(spec["device"]).eval()


class MinicpmvResamplerInputs:
    """``resampler(x, tgt_sizes)`` on the side's own ``Resampler2_5``; the thunk returns the output
    ``(B, num_queries, embed_dim)``."""

    def specs(self, available: Sequence[str], contract: str) -> st.SearchStrategy[dict]:
        return _resampler_specs(available, contract)

    def materialize(self, spec: dict, impl: Impl, side: str) -> Callable[[], Any]:
        if impl.owner is None:
            raise HarnessError(f"{impl.path} must be Resampler2_5.forward")
        resampler = resampler_of(impl.module, spec)
        x, tgt_sizes = x_of(spec), tgt_sizes_of(spec)
        forward = impl.function

        def call() -> Any:
            with torch.no_grad():
                return forward(resampler, x, tgt_sizes)

        return call


def grows_cache(spec: dict) -> bool:
    """Whether a slice is taller or wider than the cache, so ``_adjust_pos_cache`` rebuilds it."""
    return any(h > spec["max_size"][0] or w > spec["max_size"][1] for h, w in spec["images"])


def resampler_sync_budget(spec: dict) -> int:
    """Syncs 0.30.0's forward may make by design (an upper bound): none with the sizes on the host (pinned
    copy); with the sizes on the device (the graph buffer's eager warm-up), ``_adjust_pos_cache``'s two
    ``.item()`` reads; and where a slice outgrows the cache, the rebuilt cache's copy from pageable host
    memory (``torch.from_numpy(...).float().to(device)`` in ``_set_2d_pos_cache``)."""
    return (2 if spec["tgt_on"] == "device" else 0) + (1 if grows_cache(spec) else 0)
