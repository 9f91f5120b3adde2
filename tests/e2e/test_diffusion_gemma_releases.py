"""diffusion-gemma-sampler against the releases that rewrote it (0.31.0-0.34.0).

0.31.0 moved the per-row statistics into vllm/model_executor/models/diffusion_gemma_sampler.py
(``sample_row_stats``, a catalog file the side builder pulls from), sized tiles by
``torch.accelerator.get_memory_info()`` and added per-token-id logprobs; 0.33.0 passes
``get_top_k_top_p`` the vocabulary size; 0.34.0 takes ``hidden_states`` and a per-tile
``compute_logits``. Each side is called its own release's way (strategies/diffusion_gemma/inputs.py
``sampler_convention``); these tests pin that, that logprob requests are drawn and reach every
release's sampler, and that a bug planted in the 0.34.0 convention's path is caught.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, settings

from fuzz.api import RELEASE_ATTRIBUTE, Impl
from fuzz.engine.execute import run_example
from fuzz.records.verdicts import Verdict
from fuzz.releases.packs import SHIPPED_PACKS, catalog_paths, read_manifest
from fuzz.releases.sides import bind
from fuzz.targets import lookup
from strategies.diffusion_gemma.inputs import (
    IdentityHead,
    SamplerConvention,
    fold_tile_calls,
    sampler_convention,
)

(SAMPLER,) = lookup(["diffusion-gemma-sampler"])
RELEASES = ("0.31.0", "0.32.0", "0.33.0", "0.34.0")
CONVENTIONS = {
    "0.31.0": SamplerConvention("logits", "accelerator", 3),
    "0.32.0": SamplerConvention("logits", "accelerator", 3),
    "0.33.0": SamplerConvention("logits", "accelerator", 3),
    "0.34.0": SamplerConvention("hidden_states", "accelerator", 5),
}
COPY_CONVENTION = SamplerConvention("logits", "platform", 10)
DIMS = {"device": "cpu", "max_num_reqs": 3, "canvas_length": 3, "vocab_size": 6, "hidden_size": 2,
        "stability_threshold": 2, "max_denoising_steps": 4, "seed": 11}


def spec(counts: list[int], **overrides) -> dict:
    """Decode requests with ``counts`` logits each (slot i), no top-k/top-p, no logprobs."""
    requests = [{"logits": c, "prompt_len": 4, "computed": 4, "chunk": max(c, 1), "slot": i}
                for i, c in enumerate(counts)]
    out = {**DIMS, "requests": requests, "num_draft_tokens": sum(counts), "tile": 1,
           "top_k": [DIMS["vocab_size"]] * 3, "top_p": [1.0] * 3, "num_logprobs": [-1] * 3,
           "logprobs_mode": "raw_logprobs", "logits_dtype": "float32", "cu_dtype": "int32", "idx_dtype": "int64",
           "t_min": 0.5, "t_max": 1.0, "confidence_threshold": 0.5, "entropy_bound": 1.0, "stashed_logprobs": []}
    out.update(overrides)
    return out


@pytest.fixture(scope="module")
def sides() -> dict:
    """version -> the target with legacy 0.28.0 and optimized that release, both rebuilt."""
    return {version: bind(SAMPLER, "vllm==0.28.0", f"vllm=={version}") for version in RELEASES}


# -- the side builds, and each release's convention ---------------------------------------------


@pytest.mark.parametrize("version", RELEASES)
def test_side_builds_and_pulls_the_row_stats_helper(sides, version):
    impl = sides[version].impl("optimized")
    assert getattr(impl.module, RELEASE_ATTRIBUTE) == version
    # From vllm/model_executor/models/diffusion_gemma_sampler.py, pulled beside __call__; and the
    # method 0.31.0 added to DiffusionGemmaRequestStates that _finish_prefills calls.
    assert callable(impl.module.sample_row_stats) and callable(impl.module.sample_row_stats_reference)
    assert callable(impl.module.DiffusionGemmaRequestStates.apply_seed_canvases)


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_is_called_its_own_way(sides, version):
    assert sampler_convention(sides[version].impl("optimized")) == CONVENTIONS[version]
    assert sampler_convention(sides[version].impl("legacy")) == COPY_CONVENTION  # vllm==0.28.0
    assert sampler_convention(SAMPLER.impl("optimized")) == COPY_CONVENTION  # the copy


@pytest.mark.parametrize("version", RELEASES)
def test_the_release_table_agrees_with_the_source(sides, version):
    """A side whose __call__ source cannot be read falls back to its release's row of the table."""
    impl = sides[version].impl("optimized")
    first = "hidden_states" if version == "0.34.0" else "logits"
    namespace: dict = {}
    exec(f"def __call__(self, {first}, input_batch, draft_logits=None): pass", namespace)  # no source file
    module = types.ModuleType("unreadable")
    setattr(module, RELEASE_ATTRIBUTE, version)
    unreadable = Impl(impl.path, namespace["__call__"], impl.owner, module)
    assert sampler_convention(unreadable) == CONVENTIONS[version]


def test_a_signature_the_input_model_cannot_call_is_its_reason():
    class Odd:
        def __init__(self, sampler, *, lm_head):
            pass

        def __call__(self, logits, input_batch):
            pass

    impl = Impl("x:Odd.__call__", Odd.__call__, Odd, sys.modules[__name__])
    assert "lm_head" in sampler_convention(impl)
    assert "lm_head" in SAMPLER.input_model().fits(impl)


def test_0_34_gets_hidden_states_and_an_identity_head(sides):
    impl = sides["0.34.0"].impl("optimized")
    seen: list = []

    @functools.wraps(impl.function)  # its signature and source: the side's
    def spy(self, hidden_states, input_batch, draft_logits=None):
        seen.append(self.compute_logits)
        return impl.function(self, hidden_states, input_batch, draft_logits)

    SAMPLER.input_model().materialize(spec([3, 2], tile=1), Impl(impl.path, spy, impl.owner, impl.module),
                                      "optimized")()
    # Two tiles of one request each, each padded to the canvas width: the head saw W rows twice.
    assert isinstance(seen[0], IdentityHead) and seen[0].rows == [3, 3]


@pytest.mark.parametrize("version", RELEASES)
def test_releases_agree_with_0_28_without_filters_or_logprobs(sides, version):
    """No top-k/top-p and no logprobs: the two upstream changes that make them differ stay out
    (docs/findings/drift.md F19); a truncated canvas and several tiles stay in."""
    for case in (spec([3, 2, 3], tile=1), spec([3, 0, 1], tile=2), spec([3, 3], tile=0, t_min=0.0)):
        result = run_example(sides[version], case)
        assert result.verdict is Verdict.AGREE, (version, case, result.mismatches)


def test_fold_tile_calls_gives_the_single_call_form(sides):
    """0.34.0's per-tile expansions, folded, equal 0.28.0's one expansion (truncated canvas included)."""
    case = spec([3, 2, 1], tile=1, top_k=[2, 6, 6])  # one filtering slot: get_top_k_top_p is called
    legacy = SAMPLER.input_model().materialize(case, sides["0.34.0"].impl("legacy"), "legacy")()
    optimized = SAMPLER.input_model().materialize(case, sides["0.34.0"].impl("optimized"), "optimized")()
    assert len(legacy["top_k_top_p_calls"]) == len(optimized["top_k_top_p_calls"]) == 1
    for key in ("expanded_idx_mapping", "idx_mapping_np"):
        assert legacy["top_k_top_p_calls"][0][key].tolist() == optimized["top_k_top_p_calls"][0][key].tolist()
    assert legacy["top_k_top_p_calls"][0]["expanded_idx_mapping"].tolist() == [0, 0, 0, 1, 1, 2]
    # A call that is not made of runs of the canvas width is kept as it came.
    odd = [{"expanded_idx_mapping": legacy["top_k_top_p_calls"][0]["expanded_idx_mapping"],
            "idx_mapping_np": legacy["top_k_top_p_calls"][0]["idx_mapping_np"]}]
    assert fold_tile_calls(odd, case) is odd


# -- logprob requests: drawn, and passed to every release's sampler ----------------------------


def test_caller_contract_draws_logprob_requests_with_stashes():
    drawn = find(SAMPLER.input_model().specs(["cpu"], "caller"),
                 lambda s: s["num_draft_tokens"] > 0 and max(s["num_logprobs"][r["slot"]] for r in s["requests"]) >= 1
                 and s["stashed_logprobs"],
                 settings=settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck)))
    assert drawn["stashed_logprobs"]


@pytest.mark.parametrize("version", ("copy", *RELEASES))
def test_logprob_requests_reach_the_sampler(sides, version):
    """A batch asking for 2 logprobs: every convention reads it (max_num_logprobs), scores the
    converging slots with compute_topk_scores at that width and hands a committing slot's stash out."""
    impl = SAMPLER.impl("optimized") if version == "copy" else sides[version].impl("optimized")
    stashed = handed = 0
    for seed in range(12):
        case = spec([3, 3, 3], tile=3, seed=seed, num_logprobs=[2, -1, 2], stashed_logprobs=[0, 1, 2],
                    confidence_threshold=50.0)  # every denoising slot converges: its stash is computed
        out = SAMPLER.input_model().materialize(case, impl, "optimized")()
        for lp in out["pending_logprobs"].values():
            assert lp["logprob_token_ids"].shape[1] == 3  # the sampled token and the top 2
            stashed += 1
        if out["logprobs"] is not None:
            assert out["logprobs"]["logprob_token_ids"].shape[1] == 3
            handed += 1
    assert stashed and handed


# -- a planted bug in the 0.34.0 convention's path ----------------------------------------------


def file_mutant(module: types.ModuleType, name: str, old: str, new: str, folder: Path) -> types.ModuleType:
    """fuzz.mutate.mutant_module, written to a file: a rebuilt >= 0.31.0 side holds a @triton.jit
    kernel (sample_row_stats), and triton reads a kernel's source from its file."""
    source = Path(module.__file__).read_text(encoding="utf-8")
    assert source.count(old) == 1
    file = folder / f"{name.rpartition('.')[2]}.py"
    file.write_text(source.replace(old, new), encoding="utf-8")
    loaded = importlib.util.spec_from_file_location(name, file)
    mutant = importlib.util.module_from_spec(loaded)
    sys.modules[name] = mutant
    loaded.loader.exec_module(mutant)
    setattr(mutant, RELEASE_ATTRIBUTE, getattr(module, RELEASE_ATTRIBUTE))
    return mutant


def test_a_bug_planted_in_the_0_34_tile_projection_is_caught(sides, tmp_path):
    """``compute_logits`` run over the whole batch instead of the tile's rows: each tile after the
    first samples the first tile's logits. Fuzzed 0.34.0 against its mutant, as tests/planted's bugs
    are fuzzed against their copy."""
    built = sides["0.34.0"]
    module = built.impl("optimized").module
    name = "tests._planted_dg_0_34_whole_batch_projection"
    file_mutant(module, name, "tile_logits = self.compute_logits(tile_hidden)",
                "tile_logits = self.compute_logits(hidden_states)[: tile_hidden.shape[0]]", tmp_path)
    planted = dataclasses.replace(built, legacy=built.optimized, optimized=f"{name}:DiffusionSampler.__call__")
    assert run_example(planted, spec([3, 3, 3], tile=3)).verdict is Verdict.AGREE  # one tile: same rows
    assert run_example(planted, spec([3, 3, 3], tile=1)).verdict is Verdict.DIVERGENCE

    def caught(case: dict) -> bool:
        return run_example(planted, case).verdict is not Verdict.AGREE

    find(SAMPLER.input_model().specs(["cpu"], "caller"), caught,
         settings=settings(max_examples=200, database=None, deadline=None, suppress_health_check=list(HealthCheck)))


# -- the source packs ----------------------------------------------------------------------------


def test_packs_hold_the_sampler_helper_or_record_it_absent():
    """diffusion_gemma_sampler.py is a catalog file (optimized/diffusion_gemma.py names it): the shipped
    packs of 0.31.0 on hold it, older ones list it as absent and still serve as merge base (0.28.0 is
    the base of every side above)."""
    helper = "vllm/model_executor/models/diffusion_gemma_sampler.py"
    assert helper in catalog_paths()
    for version in ("0.27.1", "0.28.0", "0.29.0", "0.30.0", *RELEASES):
        manifest = read_manifest(SHIPPED_PACKS / f"vllm-{version}")
        if version in RELEASES:
            assert helper in manifest["files"] and helper not in manifest["absent"]
        else:
            assert helper in manifest["absent"] and helper not in manifest["files"]


# -- the row statistics on CUDA ------------------------------------------------------------------


def test_on_cuda_a_side_with_the_row_stats_kernel_runs_upstreams_reference_form(sides):
    """0.31.0+'s Triton kernel draws its Gumbel noise with tl.rand, 0.28.0 with torch.rand_like: on CUDA the
    side's sample_row_stats is swapped for upstream's sample_row_stats_reference during the call (the seed
    argument dropped), and put back after; on the CPU, and on a side without the kernel, nothing changes."""
    from strategies.diffusion_gemma.inputs import reference_row_stats

    module = sys.modules[sides["0.34.0"].impl("optimized").function.__module__]
    kernel, reference = module.sample_row_stats, module.sample_row_stats_reference
    seen = []
    module.sample_row_stats_reference = lambda *args: seen.append(args) or "reference"
    try:
        with reference_row_stats(module, "cuda:0"):
            assert module.sample_row_stats("logits", "temps", 3, 1234, None) == "reference"
        assert seen == [("logits", "temps", 3, None)] and module.sample_row_stats is kernel
        with reference_row_stats(module, "cpu"):
            assert module.sample_row_stats is kernel
    finally:
        module.sample_row_stats_reference = reference
    legacy = sys.modules[sides["0.34.0"].impl("legacy").function.__module__]
    with reference_row_stats(legacy, "cuda"):
        assert not hasattr(legacy, "sample_row_stats")
