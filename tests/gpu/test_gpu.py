"""GPU-only: the sync oracle and the targets on CUDA (skipped without CUDA)."""

from __future__ import annotations

import pytest

import tests.planted as planted
from fuzz.records.verdicts import Verdict
from fuzz.run.triage import load_known_issues, mark_known
from fuzz.targets import catalog_targets
from tests.conftest import requires_cuda
from tests.support import ROOT, fuzz

TARGETS = catalog_targets()

pytestmark = requires_cuda
BY_NAME = {t.name: t for t in TARGETS}


def test_optimized_offsets_make_no_sync_while_legacy_does():
    outcome = fuzz(BY_NAME["fla-chunk-offsets"], devices=("cuda",), max_examples=30)
    tally = outcome.tallies["cuda"]
    assert not outcome.failures
    assert set(tally.optimized_syncs) == {0}
    assert min(tally.legacy_syncs) >= 1


@pytest.mark.parametrize("name", sorted(p.name for p in planted.SYNC_BUGS))
def test_planted_sync_regression_is_reported_on_cuda(name):
    plant = {p.name: p for p in planted.SYNC_BUGS}[name]
    outcome = fuzz(plant.target(), devices=("cuda",), max_examples=100)
    assert outcome.verdict is Verdict.SYNC_REGRESSION
    assert "syncs per call" in outcome.failures[0].mismatches[0].detail


@pytest.fixture(scope="module")
def isolation(tmp_path_factory):
    from fuzz.run.isolation import Isolation

    isolation = Isolation(workdir=tmp_path_factory.mktemp("journal"))
    yield isolation
    isolation.discard_worker()


# A race: on CUDA only --stress makes it show (test_stress_mode_catches_the_reused_staging_buffer_on_cuda).
_CUDA_RACES = {"planted-glm4-reused-staging-buffer"}


# A bug on a path only host tensors take says so (Plant.shows_on); tests/e2e/test_planted.py reports it on CPU.
@pytest.mark.parametrize("name", sorted(p.name for p in planted.BUGS
                                        if p.name not in _CUDA_RACES and "cuda" in p.shows_on))
def test_planted_bug_is_reported_on_cuda(name, isolation):
    """In a fuzz worker process, as `fuzz run` does: on CUDA several planted
    bugs index out of bounds, a device-side assert that leaves the CUDA context
    unusable (a crash verdict: found). In-process it failed every later CUDA
    test of the same pytest worker (H200, 2026-11-29: 45 such failures)."""
    from fuzz.config import RunConfig
    from fuzz.run.isolation import fuzz_isolated

    plant = {p.name: p for p in planted.BUGS}[name]
    config = RunConfig(devices=("cuda",), seed=0, max_examples=200, target_modules=("tests.planted",),
                       example_timeout=120, max_restarts=0)
    entry = fuzz_isolated(plant.target(), config, None, isolation)
    assert entry.failures, f"{name} survived on cuda"
    assert not entry.fuzzer_error, entry.fuzzer_error


@pytest.mark.parametrize("name", sorted(t.name for t in TARGETS))
def test_every_target_agrees_on_cuda_under_the_caller_contract(name):
    """No failure but those known-issues.json accepts, with a reason (docs/findings/)."""
    outcome = fuzz(BY_NAME[name], devices=("cuda",), max_examples=100)
    (entry,) = mark_known([outcome.entry()], load_known_issues(ROOT / "known-issues.json"), "caller")
    new = [(f.verdict, f.input, f.mismatches) for f in entry.failures if not f.known]
    assert outcome.examples >= 100 and not new, new


# Every target under the caller contract, and under the wide one the models that refuse a device (runs_on).
_ONE_DRAW = [(t.name, "caller") for t in TARGETS] + [
    (t.name, "wide") for t in TARGETS if hasattr(t.input_model(), "runs_on")]


@pytest.mark.parametrize(("name", "contract"), sorted(_ONE_DRAW))
def test_one_draw_runs_on_cpu_and_cuda(name, contract, monkeypatch):
    """fuzz.engine.devices.on_devices on the real pair: a spec drawn once runs on cpu and on cuda, except where its
    model refuses the device (runs_on: a CUDA-only form not on cpu, ids past the grid not on cuda, where
    they would end the process). No fuzzer error, no crash; under the caller contract no new failure."""
    import fuzz.engine.runner as runner

    refused: list[dict] = []
    run = runner.run_example

    def checked(target, spec, **kwargs):  # noqa: ANN001, ANN202
        allows = getattr(target.input_model(), "runs_on", None)
        if allows is not None and not allows(spec, spec["device"]):
            refused.append(spec)
        return run(target, spec, **kwargs)

    monkeypatch.setattr(runner, "run_example", checked)
    outcome = fuzz(BY_NAME[name], devices=("cpu", "cuda"), max_examples=40, contract=contract)
    entry = outcome.entry()
    assert not entry.fuzzer_error, entry.fuzzer_error
    assert outcome.tallies["cpu"].examples and outcome.tallies["cuda"].examples
    assert not [f for f in entry.failures if f.verdict == Verdict.CRASH.value], entry.failures
    # A refused device runs only specs drawn for it: never one the model refuses there.
    assert not refused, refused[:3]
    if contract == "caller":
        (marked,) = mark_known([entry], load_known_issues(ROOT / "known-issues.json"), "caller")
        assert not [f for f in marked.failures if not f.known]


@requires_cuda
def test_ultravox_on_sdpa_costs_its_consumer_a_sync_per_layer_call():
    """F17, measured: 0.28.0 hands the whisper layers a device cu_seqlens, which
    torch_sdpa_wrapper reads with .tolist(); 0.27.1's dense mask cost nothing."""
    from fuzz.engine.execute import run_example

    spec = {"device": "cuda", "dtype": "float32", "seed": 0, "field_dtype": "int64",
            "field_on": {"legacy": "device", "optimized": "cpu"}, "num_mel_bins": 1, "d_model": 4,
            "max_source_positions": 2, "frames": 1, "audio_lens": [1], "layers": 2, "attn_backend": "TORCH_SDPA",
            "pad_audio_to_max_context": False}
    sdpa = run_example(BY_NAME["keep-on-cpu-ultravox-audio-lens"], spec)
    assert (sdpa.legacy.consumer_syncs, sdpa.optimized.consumer_syncs) == (0, 2)
    assert sdpa.verdict is Verdict.SYNC_REGRESSION and sdpa.mismatches[0].path == "consumer"
    flash = run_example(BY_NAME["keep-on-cpu-ultravox-audio-lens"], {**spec, "attn_backend": "FLASH_ATTN"})
    assert (flash.legacy.consumer_syncs, flash.optimized.consumer_syncs) == (0, 0)  # max_seqlen is a host tensor


def test_small_pageable_staging_is_not_a_sync_for_chunk_indices():
    """optimized prepare_chunk_indices stages its (small) table non-blocking
    from pageable memory: the driver stages it without waiting (measured), so
    only the deliberate `.tolist()` is left (finding F4, corrected)."""
    outcome = fuzz(BY_NAME["fla-chunk-indices"], devices=("cuda",), max_examples=30)
    tally = outcome.tallies["cuda"]
    assert set(tally.optimized_hidden) == {0}
    assert set(tally.optimized_syncs) <= {1}


def test_stress_mode_catches_the_reused_staging_buffer_on_cuda():
    plant = {p.name: p for p in planted.BUGS}["planted-glm4-reused-staging-buffer"]
    outcome = fuzz(plant.target(), devices=("cuda",), max_examples=100, stress=True)
    assert outcome.verdict is Verdict.DIVERGENCE


# Every target, the multimodal ones included: their input models declare that no caller rewrites the cache's
# items (``caller_never_rewrites``), which 0.30.0's zero-copy outputs alias by design (F21), so stress leaves them
# alone (before that declaration they were excluded here: NaN in the output, H100 2026-12-06).
@pytest.mark.parametrize("name", sorted(t.name for t in TARGETS))
def test_real_copies_pass_under_stress_on_cuda(name):
    outcome = fuzz(BY_NAME[name], devices=("cuda",), max_examples=50, stress=True)
    # Stress judges values only (no sync verdicts), so any failure here is a real hazard, unless it is a
    # documented finding of the copies themselves (F20: idefics2's ties are there with or without stress).
    (marked,) = mark_known([outcome.entry()], load_known_issues(ROOT / "known-issues.json"), "caller")
    new = [(f.verdict, f.input, f.mismatches) for f in marked.failures if not f.known]
    assert not new, new


def test_empty_pinned_list_is_not_a_hidden_sync():
    """async_tensor_h2d([]) pins an empty tensor: it has no storage pointer, so
    is_pinned() is False, but a zero-byte copy stages nothing. Counting it was a
    false sync-regression in the first multi-GPU nightly run (2026-11-29)."""
    from fuzz.engine.execute import run_example

    result = run_example(BY_NAME["async-tensor-h2d"], {"device": "cuda", "values": [], "form": "list", "dtype": None})
    assert result.verdict is Verdict.AGREE, result.mismatches
    assert (result.legacy.syncs, result.optimized.syncs) == (0, 0)


def test_only_a_large_pageable_non_blocking_copy_counts():
    import torch

    from fuzz.oracles.syncs import PAGEABLE_STAGED_BYTES, counting_syncs

    with counting_syncs(True) as tally:
        torch.empty(2 * PAGEABLE_STAGED_BYTES, dtype=torch.uint8).to("cuda", non_blocking=True)
    assert (tally.total, tally.hidden) == (1, 1)
    assert tally.hidden_sites[0].startswith("gpu/test_gpu.py:")  # the site is the last two path parts
    big = torch.empty(2 * PAGEABLE_STAGED_BYTES, dtype=torch.uint8)
    on_gpu = torch.empty_like(big, device="cuda")
    with counting_syncs(True) as tally:  # every spelling of the copy the fuzzed code uses
        big.to(on_gpu.device, torch.uint8, True)
        big.cuda(non_blocking=True)
        on_gpu.copy_(big, non_blocking=True)
        torch.Tensor.to(big, "cuda", non_blocking=True)
    assert (tally.total, tally.hidden, len(tally.hidden_sites)) == (4, 4, 4)
    with counting_syncs(True) as tally:
        torch.arange(4).to("cuda", non_blocking=True)  # small: staged without waiting
        torch.empty(2 * PAGEABLE_STAGED_BYTES, dtype=torch.uint8).pin_memory().to("cuda", non_blocking=True)
        torch.empty(0).to("cuda", non_blocking=True)
    assert (tally.total, tally.hidden) == (0, 0)
