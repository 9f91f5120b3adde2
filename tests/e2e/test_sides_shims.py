"""Sides from vllm main: a tree that moves catalog modules under vllm/foundation/ and leaves compatibility
shims behind builds, and fuzzes, as the tree without the move (fuzz/releases/shims.py, docs/sides.md).

The trees are the shipped 0.34.0 pack (tests/shimtrees.py); nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz.code.codediff import changed_definitions
from fuzz.releases.packs import catalog_paths, read_manifest
from fuzz.releases.sidebuild import build_module, moved_modules
from fuzz.releases.sides import CannotBuild, _identity, base_source, bind
from fuzz.releases.sources import TreeSource
from fuzz.targets import lookup
from tests.shimtrees import (
    FLA,
    GPU_SYNC_DEBUG,
    MOVES,
    TORCH_UTILS,
    module,
    plain_tree,
    shim_text,
    shimmed_tree,
)
from tests.support import cli

# A one-line change inside the module that moves: both trees carry it, so the run has something to find.
PLANTED = {TORCH_UTILS: ("return t.to(device=device, dtype=dtype, non_blocking=True)",
                         "return t.to(device=device, dtype=dtype, non_blocking=True).flip(0)")}
TARGETS = ("async-tensor-h2d", "fla-chunk-indices", "fla-chunk-offsets")  # the ones that use the moved modules


def same(text: str, source: TreeSource) -> str:
    """A rebuilt module's text with its source's label (a comment naming the tree) left out."""
    return text.replace(source.label, "<tree>")




# --------------------------------------------------------------------------- building


def test_a_side_with_a_shim_to_a_missing_module_says_so_and_names_both_paths(tmp_path):
    broken = plain_tree(tmp_path, "broken")
    (broken / TORCH_UTILS).write_text(shim_text("main-alias", module(MOVES[TORCH_UTILS]), TORCH_UTILS))
    ident = _identity(str(broken), TreeSource(broken))
    assert MOVES[TORCH_UTILS] in ident["shim_problems"][TORCH_UTILS] and ident["files"][TORCH_UTILS]
    (target,) = lookup(["async-tensor-h2d"])
    with pytest.raises(CannotBuild) as caught:
        bind(target, optimized=str(broken))
    message = str(caught.value)
    assert "async_tensor_h2d is not in" in message and TORCH_UTILS in message and MOVES[TORCH_UTILS] in message


@pytest.mark.parametrize("forms", [("main-alias", "main-alias"), ("warned", "module-name")])
def test_a_module_rebuilt_from_a_shimmed_tree_is_the_one_from_the_unshimmed_tree(tmp_path, forms):
    """Every form is read the same (above); two pairs of them are built (a build takes seconds)."""
    plain = TreeSource(plain_tree(tmp_path))
    shimmed = TreeSource(shimmed_tree(tmp_path, dict(zip((TORCH_UTILS, GPU_SYNC_DEBUG), forms))))
    base = base_source("0.28.0", ())
    paths = catalog_paths()
    for name in ("torch_utils", "fla_index", "gpu_sync_debug"):
        want = build_module(name, "optimized", base, plain, paths, "pkg")
        got = build_module(name, "optimized", base, shimmed, paths, "pkg")
        assert want.error is None and got.error is None
        assert (same(got.text, shimmed), got.changed, got.failed, got.pulled) == (
            same(want.text, plain), want.changed, want.failed, want.pulled), name


def test_new_text_importing_from_the_moved_module_maps_to_the_copys_helper(tmp_path):
    """Main's own files import from the new place (vllm.foundation.utilities.torch_utils): a name the copy's
    helper module defines for the old place is taken from it, as before the move."""
    moved_import = {FLA: ("from vllm.utils.torch_utils import async_tensor_h2d",
                          "from vllm.foundation.utilities.torch_utils import async_tensor_h2d")}
    plain = TreeSource(plain_tree(tmp_path))
    shimmed = TreeSource(shimmed_tree(tmp_path, {TORCH_UTILS: "main-alias"}, edits=moved_import))
    assert moved_modules(shimmed, catalog_paths()) == {module(MOVES[TORCH_UTILS]): module(TORCH_UTILS)}
    base = base_source("0.28.0", ())
    want = build_module("fla_index", "optimized", base, plain, catalog_paths(), "pkg")
    got = build_module("fla_index", "optimized", base, shimmed, catalog_paths(), "pkg")
    assert "from pkg.torch_utils import async_tensor_h2d" in got.text
    assert got.failed == want.failed == {} and same(got.text, shimmed) == same(want.text, plain)


def test_the_change_list_sees_the_moved_module_under_its_catalog_path(tmp_path):
    plain = TreeSource(plain_tree(tmp_path))
    shimmed = TreeSource(shimmed_tree(tmp_path, {TORCH_UTILS: "main-alias"}))
    assert changed_definitions(plain, shimmed, catalog_paths()) == []
    (shimmed.root / MOVES[TORCH_UTILS]).write_text((shimmed.root / MOVES[TORCH_UTILS]).read_text().replace(
        "return t.to(device=device, dtype=dtype, non_blocking=True)", "return t.to(device=device, dtype=dtype)"))
    (change,) = changed_definitions(plain, shimmed, catalog_paths())
    assert (change.path, change.qualname, change.kind) == (TORCH_UTILS, "async_tensor_h2d", "changed")


# --------------------------------------------------------------------------- the CLI, end to end


def run(tree: Path, tmp_path: Path, name: str) -> dict:
    report = tmp_path / f"{name}.json"
    done = cli("run", "--legacy", "vllm==0.34.0", "--optimized", str(tree), "--device", "cpu", "--seed", "0",
               "--max-examples", "20", *[a for t in TARGETS for a in ("--target", t)], "--confirm", "0",
               "--in-process", "--corpus", str(tmp_path / f"corpus-{name}"), "--report", str(report))
    assert done.returncode == 1, done.stdout + done.stderr  # the planted change diverges
    if name == "shimmed":  # the side's line names each shim and the module read for it
        assert (f"compatibility shims {GPU_SYNC_DEBUG} -> {MOVES[GPU_SYNC_DEBUG]}, {TORCH_UTILS} -> "
                f"{MOVES[TORCH_UTILS]}") in done.stderr, done.stderr
    return json.loads(report.read_text())


def outcome(entry: dict) -> dict:
    """What a target's run found, without where its files went."""
    failures = [{k: v for k, v in f.items() if k != "repro"} for f in entry["failures"]]
    return {"verdict": entry["verdict"], "examples": entry["examples"], "by_device": entry["verdict_by_device"],
            "counts": {d: r["verdicts"] for d, r in entry["by_device"].items()}, "failures": failures,
            "cannot_build": entry["cannot_build"]}


def test_a_run_on_a_shimmed_tree_finds_what_the_unshimmed_tree_gives_and_replays(tmp_path):
    plain = plain_tree(tmp_path, edits=PLANTED)
    shimmed = shimmed_tree(tmp_path, {TORCH_UTILS: "main-alias", GPU_SYNC_DEBUG: "main-alias"}, edits=PLANTED)
    want, got = run(plain, tmp_path, "plain"), run(shimmed, tmp_path, "shimmed")
    assert {t["name"]: outcome(t) for t in got["targets"]} == {t["name"]: outcome(t) for t in want["targets"]}
    verdicts = {t["name"]: t["verdict"] for t in got["targets"]}
    assert verdicts == {"async-tensor-h2d": "divergence", "fla-chunk-indices": "divergence",
                        "fla-chunk-offsets": "same-code"}
    side = got["run"]["sides"]["optimized"]
    assert side["shims"] == {TORCH_UTILS: MOVES[TORCH_UTILS], GPU_SYNC_DEBUG: MOVES[GPU_SYNC_DEBUG]}
    assert side["files"] == want["run"]["sides"]["optimized"]["files"]
    assert [c["ref"] for c in got["run"]["changes"]["changed"]] == [
        c["ref"] for c in want["run"]["changes"]["changed"]]
    (repro,) = [f["repro"] for t in got["targets"] if t["name"] == "async-tensor-h2d" for f in t["failures"]]
    assert json.loads(Path(repro).read_text())["sides"]["optimized"]["shims"] == side["shims"]
    replayed = cli("replay", repro)
    assert replayed.returncode == 1 and "DIVERGENCE reproduced" in replayed.stdout, replayed.stdout + replayed.stderr
    # The moved module changes (not the shim): the saved failure no longer names the code that is there.
    moved = shimmed / MOVES[TORCH_UTILS]
    moved.write_text(moved.read_text().replace(".flip(0)", ""))
    refused = cli("replay", repro, "--strict")
    assert refused.returncode == 2 and "has changed since the failure was saved" in refused.stderr
    assert TORCH_UTILS in refused.stderr
    # Without --strict it replays on the tree as it is now, naming the change by the catalog path.
    replayed = cli("replay", repro)
    assert replayed.returncode in (0, 1) and replayed.stderr == "", replayed.stdout + replayed.stderr
    assert f"its optimized side {shimmed.resolve()} changed ({TORCH_UTILS} " in replayed.stdout


def test_sources_fetch_from_a_shimmed_tree_makes_a_pack_that_builds_offline(tmp_path):
    shimmed = shimmed_tree(tmp_path, {TORCH_UTILS: "main-lazy", GPU_SYNC_DEBUG: "main-alias"}, edits=PLANTED)
    (shimmed / "vllm" / "_version.py").write_text('__version__ = version = "0.35.0.dev7"\n')
    done = cli("sources", "fetch", str(shimmed), "--into", str(tmp_path / "packs"))
    assert done.returncode == 0 and "2 compatibility shims" in done.stdout, done.stdout + done.stderr
    manifest = read_manifest(tmp_path / "packs" / "vllm-0.35.0.dev7")
    assert set(MOVES.values()) <= set(manifest["files"]) and manifest["shims"][TORCH_UTILS] == MOVES[TORCH_UTILS]
    (target,) = lookup(["async-tensor-h2d"])
    from_pack = bind(target, optimized="vllm==0.35.0.dev7", search=[str(tmp_path / "packs")])
    from_tree = bind(target, optimized=str(shimmed))
    assert from_pack.optimized.rpartition(":")[2] == from_tree.optimized.rpartition(":")[2] == "async_tensor_h2d"
