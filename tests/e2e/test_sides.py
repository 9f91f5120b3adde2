"""Sides from upstream sources: --legacy/--optimized copy | vllm==X | PATH (fuzz/releases/sides.py).

The trees here are copies of the source pack shipped for 0.28.0 (sources/),
edited the way a contributor's branch would be; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuzz.config import RunConfig
from fuzz.engine.runner import fuzz_target
from fuzz.errors import UsageError
from fuzz.releases.merge3 import Conflict, merge3
from fuzz.releases.packs import SHIPPED_PACKS, PackSource, read_manifest
from fuzz.releases.sides import CannotBuild, bind, check_side, template_for
from fuzz.targets import lookup
from tests.shimtrees import pack_checkout
from tests.support import cli

FLA = "vllm/third_party/flash_linear_attention/ops/index.py"
ORIGINAL_LINE = "[cu_seqlens.new_zeros(1), triton.cdiv(prepare_lens(cu_seqlens), chunk_size)]"


def default_pair_targets() -> list:
    """The catalog's targets copied from 0.27.1 / 0.28.0 (a target of another pair has its own)."""
    return [t for t in lookup([]) if tuple(getattr(t, "versions", ("0.27.1", "0.28.0"))) == ("0.27.1", "0.28.0")]


def tree(tmp_path: Path, edits: dict[str, tuple[str, str]] = {}) -> Path:  # noqa: B006 -- read only
    """The shipped 0.28.0 pack as a checkout (no manifest), with ``{path: (old, new)}`` applied."""
    return pack_checkout(SHIPPED_PACKS / "vllm-0.28.0", tmp_path / "vllm-branch", edits)


# --------------------------------------------------------------------------- the merge


def test_merge_takes_upstream_changes_and_keeps_the_copys_adaptations():
    base = ["def f(x):", "    y = helper(x)", "    z = y * 2", "    return z + 1"]
    ours = ["def f(x):", "    y = local_helper(x)  # ADAPTED", "    z = y * 2", "    return z + 1"]
    theirs = ["def f(x):", "    y = helper(x)", "    z = y * 2", "    return z + 2"]
    assert merge3(base, ours, theirs) == ["def f(x):", "    y = local_helper(x)  # ADAPTED", "    z = y * 2",
                                          "    return z + 2"]


def test_changes_on_adjacent_lines_are_a_conflict_not_a_guess():
    base = ["def f(x):", "    y = helper(x)", "    return y + 1"]
    ours = ["def f(x):", "    y = local_helper(x)  # ADAPTED", "    return y + 1"]
    theirs = ["def f(x):", "    y = helper(x)", "    return y + 2"]
    assert isinstance(merge3(base, ours, theirs), Conflict)


def test_merge_stops_at_a_region_both_changed():
    base = ["def f(x):", "    return helper(x)"]
    assert isinstance(merge3(base, ["def f(x):", "    return mine(x)  # ADAPTED"],
                             ["def f(x):", "    return theirs(x)"]), Conflict)


def test_merge_keeps_a_block_that_upstream_re_indented():
    """An `if` wrapped around lines re-indents them: indentation is part of the match."""
    base = ["for m in ms:", "    a = m", "    b(a)"]
    theirs = ["for m in ms:", "    a = m", "    if a:", "        b(a)"]
    merged = merge3(base, list(base), theirs)
    assert merged == theirs


# --------------------------------------------------------------------------- building sides


def test_the_releases_the_copies_come_from_rebuild_every_target_unchanged():
    targets = default_pair_targets()
    assert len(targets) >= 21
    for target in targets:
        built = bind(target, "vllm==0.27.1", "vllm==0.28.0")
        assert built.legacy.startswith("syncfuzz_sides.legacy_") and built.optimized.startswith("syncfuzz_sides.")
        for role in ("legacy", "optimized"):
            # Built from the releases the copies come from, every function is the copy's text
            # (the rebuilt modules are in linecache, so inspect reads them back).
            rebuilt, copy = built.impl(role).function, target.impl(role).function
            assert rebuilt is not copy and rebuilt.__module__.startswith("syncfuzz_sides.")
            assert inspect.getsource(rebuilt) == inspect.getsource(copy), (target.name, role)


@pytest.mark.parametrize("name", ["fla-chunk-offsets", "ernie-rot-pos-emb", "glm4v-pos-embeds", "async-tensor-h2d"])
def test_release_sides_give_the_copies_verdicts(name):
    (target,) = lookup([name])
    config = RunConfig(max_examples=40, seed=0, legacy="vllm==0.27.1", optimized="vllm==0.28.0")
    from_releases = fuzz_target(target, config).entry()
    from_copies = fuzz_target(target, config.replace(legacy="copy", optimized="copy")).entry()
    assert from_releases.cannot_build is None
    # async_tensor_h2d is the same code in 0.27.1 and 0.28.0: same-code, never "agree" (docs/reach.md).
    expected = "same-code" if name == "async-tensor-h2d" else "agree"
    assert from_releases.verdict == from_copies.verdict == expected
    assert from_releases.examples == from_copies.examples == 40


def test_a_newer_source_is_built_from_the_optimized_copy_and_an_older_from_legacy():
    (target,) = lookup(["fla-chunk-offsets"])
    assert template_for("0.33.0", target) == "optimized"
    assert template_for(None, target) == "optimized"  # a checkout without a version: the newest copy
    assert template_for("0.27.1", target) == "legacy"


def test_a_removed_function_is_cannot_build_with_the_reason(tmp_path):
    branch = tree(tmp_path, {FLA: ("def prepare_chunk_offsets(", "def prepare_chunk_offsets_renamed(")})
    (target,) = lookup(["fla-chunk-offsets"])
    with pytest.raises(CannotBuild, match=r"prepare_chunk_offsets is not in .*index\.py"):
        bind(target, optimized=str(branch))


def test_a_new_required_parameter_is_cannot_build(tmp_path):
    branch = tree(tmp_path, {FLA: ("def prepare_chunk_offsets(cu_seqlens: torch.Tensor, chunk_size: int)",
                                   "def prepare_chunk_offsets(cu_seqlens: torch.Tensor, chunk_size: int, pad: int)")})
    (target,) = lookup(["fla-chunk-offsets"])
    with pytest.raises(CannotBuild, match="signature changed"):
        bind(target, optimized=str(branch))


def test_a_vllm_name_the_harness_lacks_is_cannot_build(tmp_path):
    branch = tree(tmp_path, {FLA: (ORIGINAL_LINE, "[new_zeros_helper(cu_seqlens), triton.cdiv("
                                                   "prepare_lens(cu_seqlens), chunk_size)]"),
                             })
    text = (branch / FLA).read_text()
    (branch / FLA).write_text("from vllm.utils.brand_new import new_zeros_helper\n" + text)
    (target,) = lookup(["fla-chunk-offsets"])
    with pytest.raises(CannotBuild, match="needs new_zeros_helper from vllm.utils.brand_new"):
        bind(target, optimized=str(branch))


def test_a_new_helper_in_the_same_file_is_pulled_in(tmp_path):
    branch = tree(tmp_path, {FLA: (ORIGINAL_LINE, "[_zero(cu_seqlens), triton.cdiv(prepare_lens(cu_seqlens), "
                                                   "chunk_size)]")})
    text = (branch / FLA).read_text()
    (branch / FLA).write_text(text + "\n\ndef _zero(x):\n    return x.new_zeros(1)\n")
    (target,) = lookup(["fla-chunk-offsets"])
    config = RunConfig(max_examples=30, seed=0, optimized=str(branch))
    entry = fuzz_target(target, config).entry()
    assert entry.cannot_build is None and entry.verdict == "agree"  # a benign refactor passes


def test_a_vllm_function_the_copies_stand_in_for_is_mapped_to_the_stand_in(tmp_path):
    """``pin_memory_available`` says it stands in for vllm's is_pin_memory_available(): new
    upstream text calling the real one gets the stand-in, not an import of vllm."""
    branch = tree(tmp_path, {FLA: (ORIGINAL_LINE, "[cu_seqlens.new_zeros(1 if is_pin_memory_available() or True "
                                                   "else 1), triton.cdiv(prepare_lens(cu_seqlens), chunk_size)]")})
    text = (branch / FLA).read_text()
    (branch / FLA).write_text("from vllm.utils.platform_utils import is_pin_memory_available\n" + text)
    (target,) = lookup(["fla-chunk-offsets"])
    built = bind(target, optimized=str(branch))
    module = built.impl("optimized").module
    helpers = sys.modules[module.__name__.rpartition(".")[0] + ".torch_utils"]
    assert module.is_pin_memory_available is helpers.pin_memory_available
    entry = fuzz_target(target, RunConfig(max_examples=20, seed=0, optimized=str(branch))).entry()
    assert entry.verdict == "agree" and entry.examples == 20


def test_a_pulled_helper_that_would_import_vllm_when_called_is_cannot_build(tmp_path):
    branch = tree(tmp_path, {FLA: (ORIGINAL_LINE, "[_zero(cu_seqlens), triton.cdiv(prepare_lens(cu_seqlens), "
                                                   "chunk_size)]")})
    text = (branch / FLA).read_text()
    (branch / FLA).write_text(text + "\n\ndef _zero(x):\n    from vllm.platforms import current_platform\n"
                                     "    return x.new_zeros(1)\n")
    (target,) = lookup(["fla-chunk-offsets"])
    with pytest.raises(CannotBuild, match="its new helper _zero imports vllm.platforms inside its body"):
        bind(target, optimized=str(branch))


def test_a_changed_decorator_the_copy_drops_is_not_a_conflict(tmp_path):
    """The copy runs `_compute_num_rejected` eagerly (its @torch.compile is an ADAPTED comment):
    upstream giving the decorator a backend (0.29.0 did) changes nothing the copy runs."""
    gemma = "vllm/model_executor/models/diffusion_gemma.py"
    branch = tree(tmp_path, {gemma: ("@torch.compile(dynamic=True)\ndef _compute_num_rejected(",
                                     "@torch.compile(dynamic=True, backend=current_platform.simple_compile_backend)"
                                     "\ndef _compute_num_rejected(")})
    (target,) = lookup(["diffusion-gemma-sampler"])
    built = bind(target, optimized=str(branch))
    assert built.impl("optimized").module._compute_num_rejected.__name__ == "_compute_num_rejected"


def test_a_base_pack_missing_a_file_the_targets_name_is_cannot_build(tmp_path):
    shutil.copytree(SHIPPED_PACKS / "vllm-0.28.0", tmp_path / "vllm-0.28.0")
    manifest = json.loads((tmp_path / "vllm-0.28.0" / "MANIFEST.json").read_text())
    del manifest["files"][FLA]
    (tmp_path / "vllm-0.28.0" / "MANIFEST.json").write_text(json.dumps(manifest))
    (target,) = lookup(["fla-chunk-offsets"])
    with pytest.raises(CannotBuild, match=f"the vllm 0.28.0 source .* has no {FLA}"):
        bind(target, optimized=str(tree(tmp_path)), search=[str(tmp_path)])


# --------------------------------------------------------------------------- the CLI, end to end


@pytest.fixture(scope="module")
def branch_failure(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A branch checkout with a one-line divergence, one run against it as ``--optimized PATH``: the branch,
    the one repro file the run saved, and the report."""
    tmp_path = tmp_path_factory.mktemp("branch")
    branch = tree(tmp_path, {FLA: ("cu_seqlens.new_zeros(1)", "cu_seqlens.new_ones(1)")})
    corpus, report = tmp_path / "corpus", tmp_path / "report.json"
    done = cli("run", "--target", "fla-chunk-offsets", "--target", "fla-chunk-indices", "--device", "cpu",
               "--seed", "0", "--max-examples", "30", "--optimized", str(branch), "--corpus", str(corpus),
               "--report", str(report), "--confirm", "0", "--in-process")
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads(report.read_text())
    (repro,) = [Path(f["repro"]) for t in data["targets"] for f in t["failures"]]
    return branch, repro, data


def test_a_one_line_edit_in_a_branch_is_reported_and_replays(branch_failure):
    branch, repro, data = branch_failure
    verdicts = {t["name"]: t["verdict"] for t in data["targets"]}
    assert verdicts == {"fla-chunk-offsets": "divergence", "fla-chunk-indices": "agree"}
    side = data["run"]["sides"]["optimized"]
    assert side["kind"] == "path" and side["side"] == str(branch.resolve()) and side["files"][FLA]
    assert json.loads(repro.read_text())["sides"]["optimized"]["files_sha256"] == side["files_sha256"]
    replayed = cli("replay", str(repro))
    assert replayed.returncode == 1 and "DIVERGENCE reproduced" in replayed.stdout, replayed.stdout + replayed.stderr
    assert "not the code that saved" not in replayed.stdout


# --------------------------------------------------------------------------- fix, then replay (issue 45)


@pytest.fixture
def fixed_branch(branch_failure, tmp_path) -> Iterator[tuple[Path, Path, str]]:
    """The branch of ``branch_failure`` with its divergence fixed (undone on teardown): the repro, a folder
    holding a copy of it, and the line replay prints about the change (the file's hashes then and now)."""
    branch, repro, _ = branch_failure
    planted = (branch / FLA).read_text()
    (branch / FLA).write_text(planted.replace("new_ones(1)", "new_zeros(1)"))
    folder = tmp_path / "failures"
    folder.mkdir()
    shutil.copy(repro, folder / repro.name)
    then = json.loads(repro.read_text())["sides"]["optimized"]["files"][FLA][:8]
    now = hashlib.sha256((branch / FLA).read_text().encode()).hexdigest()[:8]
    assert then != now
    change = f"its optimized side {branch.resolve()} changed ({FLA} {then} -> {now})"
    yield repro, folder, change
    (branch / FLA).write_text(planted)


def test_a_fixed_branch_replays_as_it_is_now_and_no_longer_fails(fixed_branch):
    repro, _, change = fixed_branch
    replayed = cli("replay", str(repro))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert f"warning: not the code that saved this failure: {change}; replaying on the code there now " \
           "(--strict refuses)" in replayed.stdout.splitlines()
    assert "no longer fails: legacy and optimized agree on cpu" in replayed.stdout


def test_a_fixed_branch_replays_in_a_folder_beside_an_unusable_file(fixed_branch):
    repro, folder, change = fixed_branch
    replayed = cli("replay", str(folder))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    lines = replayed.stdout.splitlines()
    assert f"warning: not the code that saved 1 of these failures: {change}; replaying on the code there now " \
           "(--strict refuses)" in lines
    (row,) = [line for line in lines if line.startswith(repro.name)]
    assert row.endswith("no longer fails")
    assert lines[-1] == "replayed 1 of 1 repro file(s): 0 still fail, 1 no longer fail, 0 accepted, 0 invalid"
    (folder / "half-written.json").write_text('{"format": "syncfuzz-repro/1", "tar')
    replayed = cli("replay", str(folder))
    assert replayed.returncode == 3, replayed.stdout + replayed.stderr  # incomplete: one file was not checked
    lines = replayed.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith(repro.name)]
    (bad,) = [line for line in lines if line.startswith("half-written.json")]
    assert row.endswith("no longer fails") and "invalid: " in bad and "not valid JSON" in bad
    assert lines[-1] == "replayed 1 of 2 repro file(s): 0 still fail, 1 no longer fail, 0 accepted, 1 invalid"


def test_strict_refuses_a_side_that_changed_since_the_failure_was_saved(fixed_branch):
    repro, folder, _ = fixed_branch
    for path in (repro, folder):
        refused = cli("replay", str(path), "--strict")
        assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
        assert refused.stderr.count("\n") == 1 and "has changed since the failure was saved" in refused.stderr
        assert FLA in refused.stderr


def test_known_issues_accept_a_branch_failure_that_still_fails_in_a_folder(branch_failure, tmp_path):
    """Not fixed: the folder exits 1, unless the known-issues file accepts the failure."""
    _, repro, _ = branch_failure
    folder = tmp_path / "failures"
    folder.mkdir()
    shutil.copy(repro, folder / repro.name)
    assert cli("replay", str(folder)).returncode == 1
    known = tmp_path / "known.json"
    known.write_text(json.dumps({"format": "syncfuzz-known-issues/1", "issues": [
        {"target": "fla-chunk-offsets", "verdict": "divergence", "reason": "the branch's new first offset"}]}))
    replayed = cli("replay", str(folder), "--known-issues", str(known))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    (row,) = [line for line in replayed.stdout.splitlines() if line.startswith(repro.name)]
    assert row.endswith("still fails (divergence), accepted: the branch's new first offset")
    assert replayed.stdout.splitlines()[-1] == ("replayed 1 of 1 repro file(s): 0 still fail, 0 no longer fail, "
                                                "1 accepted, 0 invalid")


def test_a_target_that_cannot_be_built_does_not_stop_the_others(tmp_path):
    branch = tree(tmp_path, {FLA: ("def prepare_chunk_offsets(", "def prepare_chunk_offsets_renamed(")})
    report = tmp_path / "report.json"
    done = cli("run", "--target", "fla-chunk-offsets", "--target", "glm4v-embeddings", "--device", "cpu",
               "--seed", "0", "--max-examples", "5", "--optimized", str(branch), "--in-process",
               "--corpus", str(tmp_path / "c"), "--report", str(report))
    assert done.returncode == 3, done.stdout + done.stderr  # incomplete: one target ran nothing
    assert "fla-chunk-offsets: cannot-build (optimized" in done.stderr
    entries = {t["name"]: t for t in json.loads(report.read_text())["targets"]}
    assert entries["fla-chunk-offsets"]["verdict"] == "cannot-build"
    assert "prepare_chunk_offsets is not in" in entries["fla-chunk-offsets"]["cannot_build"]
    assert entries["glm4v-embeddings"]["verdict"] == "agree" and entries["glm4v-embeddings"]["examples"] == 5
    assert "cannot-build fla-chunk-offsets:" in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--optimized", "vllm==9.9.9"], "--optimized vllm==9.9.9: no source pack or cached wheel"),
    (["--legacy", "/no/such/vllm"], "--legacy '/no/such/vllm' is not copy, vllm==X.Y.Z or an existing path"),
    (["--sources", "/no/such/folder"], "--sources '/no/such/folder' is not a directory"),
])
def test_a_bad_side_is_one_line_and_exit_2_before_any_work(tmp_path, args, message, monkeypatch):
    monkeypatch.setenv("SYNCFUZZ_WHEEL_CACHE", str(tmp_path / "no-wheels"))
    done = cli("run", "--device", "cpu", "--max-examples", "5", "--corpus", str(tmp_path / "corpus"), *args,
               extra_env={"SYNCFUZZ_WHEEL_CACHE": str(tmp_path / "no-wheels")})
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "corpus").exists()


def test_check_side_makes_paths_absolute(tmp_path, monkeypatch):
    branch = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert check_side("vllm-branch", "--optimized") == str(branch.resolve())
    assert check_side("copy", "--optimized") == "copy"
    assert check_side("vllm == 0.28.0", "--optimized") == "vllm==0.28.0"


# --------------------------------------------------------------------------- source packs


def test_sources_fetch_writes_a_pack_from_a_wheel_with_hashes_and_license(tmp_path):
    wheel = tmp_path / "vllm-0.28.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    pack = SHIPPED_PACKS / "vllm-0.28.0"
    with zipfile.ZipFile(wheel, "w") as zipped:
        for path in read_manifest(pack)["files"]:
            zipped.write(pack / path, path)
        zipped.writestr("vllm-0.28.0.dist-info/licenses/LICENSE", "Apache License 2.0 (test)")
    done = cli("sources", "fetch", str(wheel), "--into", str(tmp_path / "packs"))
    assert done.returncode == 0, done.stderr
    made = tmp_path / "packs" / "vllm-0.28.0"
    manifest = read_manifest(made)
    assert manifest["version"] == "0.28.0" and manifest["from"] == wheel.name and len(manifest["from_sha256"]) == 64
    assert manifest["files"] == read_manifest(pack)["files"]  # the same bytes as the shipped pack
    assert (made / "LICENSE").read_text() == "Apache License 2.0 (test)"
    listed = cli("sources", "list", "--sources", str(tmp_path / "packs"))
    assert f"vllm 0.28.0  {made}" in listed.stdout and "files match the manifest" in listed.stdout


def test_a_pack_edited_after_it_was_fetched_is_refused(tmp_path):
    shutil.copytree(SHIPPED_PACKS / "vllm-0.28.0", tmp_path / "vllm-0.28.0")
    (tmp_path / "vllm-0.28.0" / FLA).write_text("# edited\n")
    with pytest.raises(UsageError, match="does not match its manifest"):
        PackSource(tmp_path / "vllm-0.28.0").read(FLA)


def test_a_release_side_resolves_from_sources_offline(tmp_path):
    """--sources DIR holding vllm-X/ is where vllm==X comes from: no wheel, no network."""
    shutil.copytree(SHIPPED_PACKS / "vllm-0.28.0", tmp_path / "vllm-0.28.0")
    (target,) = lookup(["fla-chunk-offsets"])
    entry = fuzz_target(target, RunConfig(max_examples=10, optimized="vllm==0.28.0",
                                          sources=(str(tmp_path),))).entry()
    assert entry.verdict == "agree"
