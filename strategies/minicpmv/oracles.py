"""Oracles of the minicpmv-resampler-forward target: what any correct ``Resampler2_5.forward`` output satisfies.

The callers (strategies/minicpmv/inputs.py) read the output as ``num_queries`` embeddings of ``embed_dim`` per
slice (``resampler_out.reshape(max_num_slices * query_num, embed_dim)`` in ``encoder_cudagraph_forward``; the
rows become the image's placeholder tokens). The reference is an independent per-slice computation in float64
from the same seeded weights: each slice attends over its own ``h * w`` patches only, the patch at row ``r``,
column ``c`` carrying the 2-D sin-cos embedding of ``(r, c)`` (MiniCPM-V 2.5's ``version=(2, 5)`` layout:
the column's sines and cosines, then the row's), with no padding at all -- so it says what the padded,
masked batch must equal.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fuzz.api import Reference
from strategies.minicpmv.inputs import parameter_values, x_of


def resampler_output_has_one_row_per_query(spec: dict, output: Any) -> str | None:
    """The output is ``(B, num_queries, embed_dim)`` in the input's dtype: one embedding per query per slice
    (the callers reshape it to ``B * query_num`` tokens of ``embed_dim``)."""
    want = (len(spec["images"]), spec["num_queries"], spec["embed_dim"])
    if not isinstance(output, torch.Tensor):
        return f"output is {type(output).__name__}, not a tensor"
    if tuple(output.shape) != want:
        return f"output shape {tuple(output.shape)} is not (slices, queries, embed_dim) {want}"
    if output.dtype != getattr(torch, spec["dtype"]):
        return f"output dtype {output.dtype} is not the input's {spec['dtype']}"
    return None


def resampler_output_is_finite(spec: dict, output: Any) -> str | None:
    """Every slice has at least one patch, so every query attends over at least one unmasked key: no NaN
    or infinity (a mask that hides a whole slice, or a padded key left unmasked with garbage, shows here)."""
    if isinstance(output, torch.Tensor) and not torch.isfinite(output.float()).all():
        return "output holds NaN or infinity although every slice has patches"
    return None


def _sincos(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """1-D sin-cos embedding of ``positions`` in ``dim`` channels: sines then cosines of
    ``position / 10000**(k / (dim/2))``."""
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    angles = positions.to(torch.float64)[:, None] * omega[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def pos_embed_of(h: int, w: int, embed_dim: int) -> torch.Tensor:
    """``(h * w, embed_dim)``: patch ``p`` at row ``p // w``, column ``p % w`` (row-major), the column's
    embedding in the first half, the row's in the second."""
    patches = torch.arange(h * w)
    return torch.cat([_sincos(patches % w, embed_dim // 2), _sincos(patches // w, embed_dim // 2)], dim=1)


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-6) * weight + bias


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, p: dict, heads: int) -> torch.Tensor:
    """Multi-head attention of ``query`` (Q, D) over ``key``/``value`` (N, D), written out."""
    d = query.shape[1]
    wq, wk, wv = p["attn.in_proj_weight"].split(d)
    bq, bk, bv = p["attn.in_proj_bias"].split(d)
    head = d // heads
    q = (query @ wq.T + bq).reshape(-1, heads, head).transpose(0, 1)
    k = (key @ wk.T + bk).reshape(-1, heads, head).transpose(0, 1)
    v = (value @ wv.T + bv).reshape(-1, heads, head).transpose(0, 1)
    weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(head), dim=-1)
    out = (weights @ v).transpose(0, 1).reshape(-1, d)
    return out @ p["attn.out_proj.weight"].T + p["attn.out_proj.bias"]


def per_slice_expected(spec: dict, x: torch.Tensor | None = None) -> torch.Tensor | None:
    """The resampler's output computed one slice at a time in float64 (float32 specs only: in half
    precision the sides' rounding is farther from float64 than assert_close's half tolerances)."""
    if spec["dtype"] != "float32":
        return None
    p = {name: value.double() for name, value in parameter_values(spec).items()}
    x = (x_of(dict(spec, device="cpu")) if x is None else x).double().cpu()
    query = _layer_norm(p["query"], p["ln_q.weight"], p["ln_q.bias"])
    rows = []
    for index, (h, w) in enumerate(spec["images"]):
        patches = x[index, : h * w]
        if "kv_proj.weight" in p:
            patches = patches @ p["kv_proj.weight"].T
        kv = _layer_norm(patches, p["ln_kv.weight"], p["ln_kv.bias"])
        out = _attend(query, kv + pos_embed_of(h, w, spec["embed_dim"]), kv, p, spec["num_heads"])
        rows.append(_layer_norm(out, p["ln_post.weight"], p["ln_post.bias"]) @ p["proj"])
    return torch.stack(rows).float()


def _observed(output: Any) -> Any:
    return output.detach().float().cpu() if isinstance(output, torch.Tensor) else output


PER_SLICE_REFERENCE = Reference(expected=per_slice_expected, observed=_observed, floats="close")
