"""vLLM's copy policy (fuzz/oracles/copypolicy.py), checked on CPU.

A CPU-only torch can neither pin memory nor hold a CUDA tensor, so the decisions are checked on
sides given by hand (CopySide) and, against vLLM's own checker code (sources/vllm-0.30.0 and 0.34.0,
vllm/utils/gpu_sync_debug.py, run here with its copy entry points stubbed), on CPU tensors whose
``device`` or ``is_pinned()`` a small subclass fakes.
"""

from __future__ import annotations

import ast
import itertools
import warnings
from pathlib import Path

import pytest
import torch

from fuzz.oracles.copypolicy import CopySide, dense_layout, judge_call, stall_reason, violation

ROOT = Path(__file__).resolve().parents[2]

CUDA = CopySide("cuda")
PINNED = CopySide("cpu", pinned=True)
PAGEABLE = CopySide("cpu", pinned=False)
PINNED_GAPPED = CopySide("cpu", pinned=True, dense=False)
PAGEABLE_GAPPED = CopySide("cpu", pinned=False, dense=False)
EMPTY_PAGEABLE = CopySide("cpu", pinned=False, dense=True, numel=0)


class _FakeCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA: the other side of a copy_ vLLM's wrapper judges."""

    @property
    def device(self) -> torch.device:
        return torch.device("cuda")


class _FakePinned(torch.Tensor):
    """A CPU tensor that says it is pinned."""

    def is_pinned(self, device=None) -> bool:
        return True


# ---- the rule on sides given by hand ----------------------------------------------------------


def test_pinned_dense_h2d_source_is_accepted_by_every_method():
    assert violation("copy_", CUDA, src=PINNED, non_blocking=True) is None
    assert violation("to", PINNED, device="cuda", non_blocking=True) is None
    assert violation("cuda", PINNED, device=None, non_blocking=True) is None


def test_pageable_h2d_source_is_flagged_by_every_method():
    assert violation("copy_", CUDA, src=PAGEABLE, non_blocking=True) == (
        "Tensor.copy_: non_blocking H2D copy from pageable host memory")
    assert violation("to", PAGEABLE, device=torch.device("cuda", 1), non_blocking=True) == (
        "Tensor.to: non_blocking H2D copy from pageable host memory")
    assert violation("cuda", PAGEABLE, device=0, non_blocking=True) == (
        "Tensor.cuda: non_blocking H2D copy from pageable host memory")


def test_a_pinned_source_not_densely_laid_out_is_flagged():
    assert violation("copy_", CUDA, src=PINNED_GAPPED, non_blocking=True) == (
        "Tensor.copy_: non_blocking H2D copy from host memory not densely laid out")
    assert violation("to", PINNED_GAPPED, device="cuda:0", non_blocking=True) == (
        "Tensor.to: non_blocking H2D copy from host memory not densely laid out")


def test_layout_is_judged_before_pinnedness():
    assert violation("copy_", CUDA, src=PAGEABLE_GAPPED, non_blocking=True).endswith("not densely laid out")
    assert stall_reason(PAGEABLE_GAPPED, "cuda") == "not densely laid out"


def test_d2h_copy_into_pageable_or_gapped_host_memory_is_flagged():
    assert violation("copy_", PAGEABLE, src=CUDA, non_blocking=True) == (
        "Tensor.copy_: non_blocking D2H copy into pageable host memory")
    assert violation("copy_", PINNED_GAPPED, src=CUDA, non_blocking=True) == (
        "Tensor.copy_: non_blocking D2H copy into host memory not densely laid out")
    assert violation("copy_", PINNED, src=CUDA, non_blocking=True) is None


def test_d2h_to_is_never_flagged():
    # "D2H `to` allocates a pinned destination in supported torch versions" (vLLM's _checked_to).
    assert violation("to", CUDA, device="cpu", non_blocking=True) is None


def test_blocking_copies_are_never_flagged():
    for side in (PAGEABLE, PAGEABLE_GAPPED, PINNED_GAPPED):
        assert violation("copy_", CUDA, src=side, non_blocking=False) is None
        assert violation("copy_", side, src=CUDA, non_blocking=False) is None
        assert violation("to", side, device="cuda", non_blocking=False) is None
        assert violation("cuda", side, device=None, non_blocking=False) is None


def test_device_to_device_and_host_to_host_copies_are_never_flagged():
    assert violation("copy_", CUDA, src=CUDA, non_blocking=True) is None
    assert violation("to", CUDA, device="cuda:1", non_blocking=True) is None
    assert violation("cuda", CUDA, device=None, non_blocking=True) is None
    assert violation("copy_", PAGEABLE, src=PAGEABLE_GAPPED, non_blocking=True) is None
    assert violation("to", PAGEABLE, device="cpu", non_blocking=True) is None
    assert violation("to", PAGEABLE, device=None, non_blocking=True) is None  # a dtype-only .to
    assert violation("copy_", CopySide("meta"), src=PAGEABLE, non_blocking=True) is None


def test_an_empty_host_side_copies_nothing_and_is_never_flagged():
    assert violation("copy_", CUDA, src=EMPTY_PAGEABLE, non_blocking=True) is None
    assert violation("copy_", EMPTY_PAGEABLE, src=CUDA, non_blocking=True) is None
    assert violation("to", CopySide("cpu", dense=False, numel=0), device="cuda", non_blocking=True) is None


def test_there_is_no_size_threshold():
    # syncs.PAGEABLE_STAGED_BYTES is a hidden sync's cost; the policy flags a one-element copy too.
    assert violation("copy_", CUDA, src=CopySide("cpu", numel=1), non_blocking=True) is not None


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError):
        violation("pin_memory", PAGEABLE, non_blocking=True)


# ---- density, on real layouts -----------------------------------------------------------------


@pytest.mark.parametrize(("make", "dense"), [
    (lambda: torch.arange(12).view(3, 4), True),
    (lambda: torch.arange(12).view(3, 4).t(), True),  # transposed: a pitched 2D copy, no temp
    (lambda: torch.arange(24).view(2, 3, 4).permute(2, 0, 1), True),
    (lambda: torch.arange(12)[2:7], True),  # an offset view: still one contiguous range
    (lambda: torch.arange(12).view(3, 1, 4).permute(2, 1, 0), True),  # a size-1 dimension's stride is ignored
    (lambda: torch.arange(12).view(3, 4)[:, :1], False),  # one column: a gap between its elements
    (lambda: torch.arange(12)[::2], False),  # a step slice: gaps
    (lambda: torch.arange(12).view(3, 4)[:, 1:3], False),
    (lambda: torch.arange(4).expand(3, 4), False),  # stride 0: overlapping
])
def test_dense_layout(make, dense):
    t = make()
    assert dense_layout(t.shape, t.stride()) is dense
    assert CopySide.of(t).dense is dense


def test_a_side_is_read_from_a_cpu_tensor():
    side = CopySide.of(torch.arange(6)[::2])
    assert side == CopySide("cpu", pinned=False, dense=False, numel=3)
    assert CopySide.of(torch.arange(3).as_subclass(_FakePinned)).pinned


# ---- the raw arguments of a wrapped call, read as vLLM reads them ----------------------------


def test_judge_call_reads_to_like_torch():
    t = torch.arange(4)
    assert judge_call("to", (t, "cuda"), {"non_blocking": True}).startswith("Tensor.to: non_blocking H2D")
    assert judge_call("to", (t, "cuda", torch.int32, True), {}) is not None
    assert judge_call("to", (t,), {"device": "cuda:1", "dtype": torch.float32, "non_blocking": True}) is not None
    assert judge_call("to", (t, "cuda"), {}) is None
    assert judge_call("to", (t, torch.float32), {"non_blocking": True}) is None  # no device: not a copy
    assert judge_call("to", (t, "cpu"), {"non_blocking": True}) is None
    assert judge_call("to", (t, torch.empty(0).as_subclass(_FakeCuda)), {"non_blocking": True}) is None
    assert judge_call("to", (t, "not a device"), {"non_blocking": True}) is None  # the call itself raises
    assert judge_call("to", (t.as_subclass(_FakePinned), "cuda"), {"non_blocking": True}) is None


def test_judge_call_reads_cuda_and_copy_positionally():
    t = torch.arange(4)
    assert judge_call("cuda", (t,), {"non_blocking": True}) is not None
    assert judge_call("cuda", (t, 0, True), {}) is not None
    assert judge_call("cuda", (t, "cuda:1"), {"non_blocking": True}) is not None
    assert judge_call("cuda", (t,), {}) is None
    gpu = torch.empty(4).as_subclass(_FakeCuda)
    assert judge_call("copy_", (gpu, t, True), {}) == "Tensor.copy_: non_blocking H2D copy from pageable host memory"
    assert judge_call("copy_", (gpu, t), {"non_blocking": True}) is not None
    assert judge_call("copy_", (t, gpu), {"non_blocking": True}) == (
        "Tensor.copy_: non_blocking D2H copy into pageable host memory")
    assert judge_call("copy_", (gpu, t.as_subclass(_FakePinned)), {"non_blocking": True}) is None
    # vLLM's _checked_copy_ judges only a positional src: a keyword src passes its check, and ours.
    assert judge_call("copy_", (gpu,), {"src": t, "non_blocking": True}) is None
    assert judge_call("pin_memory", (t,), {}) is None


# ---- against vLLM's own checker code ----------------------------------------------------------

_VLLM_FUNCTIONS = ("_is_dense", "_cpu_copy_stall_reason", "_report_implicit_sync", "_checked_to",
                   "_checked_cuda", "_checked_copy_")


def _vllm_checkers(version: str) -> dict:
    """vLLM's copy checkers from the source pack, armed in "error" mode, the copy itself stubbed
    (a CPU-only torch cannot run it)."""
    path = ROOT / "sources" / f"vllm-{version}" / "vllm" / "utils" / "gpu_sync_debug.py"
    tree = ast.parse(path.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in _VLLM_FUNCTIONS
            or isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "IMPLICIT_SYNC_ERROR_MESSAGE"
                                                 for t in n.targets)]
    assert {n.name for n in keep if isinstance(n, ast.FunctionDef)} == set(_VLLM_FUNCTIONS)
    scope = {"torch": torch, "warnings": warnings, "_parse_to": torch._C._nn._parse_to,
             "_active_check_mode": lambda: "error", "_torch_to_in_graph": lambda *a, **k: None,
             "_torch_cuda": lambda *a, **k: None, "_torch_copy_": lambda *a, **k: None}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), scope)  # noqa: S102
    return scope


def _vllm_verdict(checker, *args, **kwargs) -> str | None:
    try:
        checker(*args, **kwargs)
    except RuntimeError as error:
        return str(error)
    return None


def _hosts():
    base = torch.arange(24, dtype=torch.float32).view(4, 6)
    layouts = {"contiguous": base, "transposed": base.t(), "gapped": base[:, ::2], "expanded": base[0].expand(3, 6),
               "empty": base[:0], "one": base[:1, :1]}
    for (name, t), pinned in itertools.product(layouts.items(), (False, True)):
        yield f"{name}-{'pinned' if pinned else 'pageable'}", t.as_subclass(_FakePinned) if pinned else t


CALLS = [
    ("to", lambda h, gpu: ((h, "cuda"), {"non_blocking": True})),
    ("to", lambda h, gpu: ((h, "cuda:0", torch.float16, True), {})),
    ("to", lambda h, gpu: ((h, "cpu"), {"non_blocking": True})),
    ("to", lambda h, gpu: ((h, torch.float16), {"non_blocking": True})),
    ("to", lambda h, gpu: ((h, "cuda"), {})),
    ("cuda", lambda h, gpu: ((h,), {"non_blocking": True})),
    ("cuda", lambda h, gpu: ((h, 1, True), {})),
    ("cuda", lambda h, gpu: ((h,), {})),
    ("copy_", lambda h, gpu: ((gpu, h, True), {})),
    ("copy_", lambda h, gpu: ((gpu, h), {"non_blocking": True})),
    ("copy_", lambda h, gpu: ((h, gpu), {"non_blocking": True})),
    ("copy_", lambda h, gpu: ((h, gpu), {})),
    ("copy_", lambda h, gpu: ((gpu, gpu), {"non_blocking": True})),
    ("copy_", lambda h, gpu: ((h, h.clone()), {"non_blocking": True})),
    ("copy_", lambda h, gpu: ((gpu,), {"src": h, "non_blocking": True})),
]


@pytest.mark.parametrize("version", ["0.30.0", "0.34.0"])
def test_flags_exactly_what_vllms_checker_flags(version):
    vllm = _vllm_checkers(version)
    checked = {"to": vllm["_checked_to"], "cuda": vllm["_checked_cuda"], "copy_": vllm["_checked_copy_"]}
    flagged = 0
    for (host_name, host), (method, make) in itertools.product(_hosts(), CALLS):
        gpu = torch.zeros(host.shape).as_subclass(_FakeCuda)
        args, kwargs = make(host, gpu)
        theirs, ours = _vllm_verdict(checked[method], *args, **kwargs), judge_call(method, args, kwargs)
        assert (theirs is None) == (ours is None), (version, host_name, method, args[1:], kwargs, theirs, ours)
        if theirs is not None:
            flagged += 1
            direction = "D2H" if ours.split()[2] == "D2H" else "H2D"
            assert f"a non_blocking {direction} copy" in theirs
            fault = "not pinned" if ours.endswith("pageable host memory") else "not densely laid out"
            assert f"the CPU tensor is {fault}" in theirs, (theirs, ours)
    assert flagged > 20  # the grid exercises the rule, not only its exemptions


@pytest.mark.parametrize("version", ["0.30.0", "0.34.0"])
def test_density_matches_vllms_is_dense(version):
    is_dense = _vllm_checkers(version)["_is_dense"]
    for _, t in _hosts():
        assert CopySide.of(t).dense == is_dense(t)
