"""``python -m fuzz provenance``: the line matcher, drift, the CLI, and the real copies.

The matcher and drift tests use small in-memory sources and run anywhere. The
tests marked by the ``releases`` fixture need every vllm release a target was
copied from (``Target.versions``: 0.27.1 / 0.28.0, 0.29.0 / 0.30.0, ...): the
repo's source packs (``sources/``), else the wheel cache
(``$SYNCFUZZ_WHEEL_CACHE``, default ``~/.cache/syncfuzz/wheels``), or, for the
default pair, ``$SYNCFUZZ_LEGACY_SOURCE`` / ``$SYNCFUZZ_OPTIMIZED_SOURCE``; else
downloaded with pip (~320 MB each, once); without network they are skipped,
saying why.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

import tests.planted as planted
from fuzz.cli import build_parser, cmd_provenance
from fuzz.errors import HarnessError, UsageError
from fuzz.releases import common, drift, matching, packs, verify
from fuzz.releases import provenance as prov
from fuzz.releases import sources as release_sources
from fuzz.releases.matching import check_copy
from fuzz.releases.sources import TextSource
from fuzz.targets import Target, catalog_targets
from fuzz.versions import DEFAULT_PAIR

TARGETS = catalog_targets()

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_PATH = "vllm/model_executor/models/toy.py"

UPSTREAM = '''\
import numpy as np
import torch

SCALE = 2


class Toy(torch.nn.Module):
    """A toy model."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.big = torch.nn.Linear(n, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scale, then shift."""
        y = x * SCALE
        # shift by n
        y = y + self.n
        return y.to(x.device, non_blocking=True)


@torch.compile(dynamic=True)
def helper(a, b):
    c = a + b
    d = c * 2
    return d
'''


def check(copy: str, upstream: str = UPSTREAM):
    source = TextSource({UPSTREAM_PATH: upstream}, version="0.28.0")
    return check_copy("optimized/toy.py", textwrap.dedent(copy), source, [UPSTREAM_PATH], "optimized")


def unit(report, qualname: str):
    return next(u for u in report.units if u.qualname == qualname)


# --------------------------------------------------------------------------- matcher on synthetic sources


def test_verbatim_copy_verifies():
    report = check(UPSTREAM)
    assert report.ok, [u.diff for u in report.failed]
    assert {u.qualname for u in report.definitions} == {"Toy", "Toy.__init__", "Toy.forward", "helper"}
    assert all(u.upstream == f"{UPSTREAM_PATH}::{u.qualname}" for u in report.definitions)


def test_whitespace_does_not_matter():
    copy = UPSTREAM.replace("y = x * SCALE", "y   =  x *  SCALE").replace("    c = a + b", "    c =  a + b  ")
    assert check(copy).ok
    assert not check(UPSTREAM.replace("y = x * SCALE", "y = x*SCALE")).ok  # inside a line, a gap is a token break


def test_adapted_lines_are_skipped_and_counted():
    copy = UPSTREAM.replace("        self.big = torch.nn.Linear(n, n)\n",
                            "        self.big = None  # ADAPTED: the layer is not under test\n")
    report = check(copy)
    assert report.ok
    assert unit(report, "Toy.__init__").adapted == 1


def test_an_edited_line_fails_with_a_diff():
    report = check(UPSTREAM.replace("y = x * SCALE", "y = x * (SCALE + 1)"))
    assert not report.ok
    bad = unit(report, "Toy.forward")
    assert len(bad.mismatched) == 1
    text = "\n".join(bad.diff)
    assert "+" in text and "y = x * (SCALE + 1)" in text and "y = x * SCALE" in text


def test_an_edited_docstring_fails():
    assert not check(UPSTREAM.replace('"""Scale, then shift."""', '"""Shift, then scale."""')).ok


def test_reordered_lines_fail():
    copy = UPSTREAM.replace("    c = a + b\n    d = c * 2\n", "    d = c * 2\n    c = a + b\n")
    report = check(copy)
    assert not unit(report, "helper").ok
    assert len(unit(report, "helper").mismatched) == 1


def test_a_missing_qualname_fails():
    copy = UPSTREAM + "\n\ndef not_upstream(a):\n    return a\n"
    report = check(copy)
    bad = unit(report, "not_upstream")
    assert not bad.ok and "not in upstream" in bad.problem


def test_a_method_under_the_wrong_class_fails():
    copy = UPSTREAM.replace("class Toy(", "class Other(")
    report = check(copy)
    assert not unit(report, "Other.forward").ok


def test_a_dropped_upstream_line_fails_unless_marked():
    dropped = UPSTREAM.replace("        y = y + self.n\n", "")
    assert unit(check(dropped), "Toy.forward").dropped
    marked = UPSTREAM.replace("        y = y + self.n\n", "        # ADAPTED: shift dropped (not under test)\n")
    assert check(marked).ok


def test_a_decorator_replaced_by_an_adapted_comment_is_accounted():
    copy = UPSTREAM.replace("@torch.compile(dynamic=True)\n", "# @torch.compile(dynamic=True)  # ADAPTED: eager\n")
    report = check(copy)
    assert report.ok and unit(report, "helper").adapted == 1
    assert not unit(check(UPSTREAM.replace("@torch.compile(dynamic=True)\n", "")), "helper").ok


def test_a_stand_in_class_holds_verbatim_methods():
    copy = '''\
    import torch


    class Toy(torch.nn.Module):  # ADAPTED: stand-in, only what forward reads
        def __init__(self, n: int) -> None:  # ADAPTED
            super().__init__()
            self.n = n

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            """Scale, then shift."""
            y = x * SCALE
            # shift by n
            y = y + self.n
            return y.to(x.device, non_blocking=True)

        def extra(self) -> int:  # ADAPTED: stand-in helper
            return 3  # ADAPTED
    '''
    report = check(copy)
    assert report.ok, [u.diff for u in report.failed]
    assert unit(report, "Toy").stand_in and unit(report, "Toy.forward").upstream.endswith("::Toy.forward")
    edited = check(copy.replace("y = y + self.n", "y = y - self.n"))
    assert not unit(edited, "Toy.forward").ok


def test_a_multiline_docstring_is_marked_on_its_last_line():
    copy = '''\
    class Shim:  # ADAPTED: not upstream
        """A stand-in.

        Two paragraphs of our own.
        """  # ADAPTED
    '''
    report = check(copy)
    assert report.ok and unit(report, "Shim").adapted == 5  # the class line and the four docstring rows


def test_module_level_lines_must_be_upstream_or_adapted():
    copy = '"""Copied from vllm 0.28.0 (the copy\'s own docstring is not compared)."""\n' + UPSTREAM
    assert check(copy).ok and check(copy).header_docstring == 1
    assert not check("from types import SimpleNamespace\n" + UPSTREAM).ok
    assert check("from types import SimpleNamespace  # ADAPTED: config stand-in\n" + UPSTREAM).ok
    assert not check(UPSTREAM.replace("SCALE = 2", "SCALE = 3")).ok


def test_helpers_may_come_from_a_file_the_copy_names():
    other = "vllm/utils/math_utils.py"
    body = "def round_up(x, y):\n    return ((x + y - 1) // y) * y\n"
    copy = f'"""Copied from vllm 0.28.0: {UPSTREAM_PATH}, {other}."""\n\n\n{body}'
    files = {UPSTREAM_PATH: UPSTREAM, other: body}
    report = check_copy("optimized/toy.py", copy, TextSource(files), [UPSTREAM_PATH])
    assert report.ok and unit(report, "round_up").upstream == f"{other}::round_up"


def test_a_target_file_missing_from_the_version_is_reported():
    report = check_copy("optimized/toy.py", UPSTREAM, TextSource({}), [UPSTREAM_PATH])
    assert not report.ok and report.missing_files == [UPSTREAM_PATH]


def test_a_property_getter_and_setter_both_verify():
    upstream = UPSTREAM.replace("    def forward(", """    @property
    def size(self) -> int:
        return self.n

    @size.setter
    def size(self, value: int) -> None:
        self.n = value

    def forward(""")
    assert check(upstream, upstream).ok
    assert not check(upstream.replace("self.n = value", "self.n = -value"), upstream).ok


def test_the_lcs_reports_the_fewest_mismatches():
    pairs = matching.align(["a", "x", "b", "c"], ["a", "b", "c"])
    assert [i for i, _ in pairs] == [0, 2, 3]


# --------------------------------------------------------------------------- drift on synthetic sources


def test_drift_statuses_and_diff():
    base = TextSource({UPSTREAM_PATH: UPSTREAM}, version="0.28.0")
    changed = UPSTREAM.replace("d = c * 2", "d = c * 3").replace("def helper(", "def helper2(")
    new = TextSource({UPSTREAM_PATH: changed.replace("def helper2(", "def helper(")}, version="0.33.0")
    same = drift.compare(f"{UPSTREAM_PATH}::Toy.forward", "optimized", base, new)
    diff = drift.compare(f"{UPSTREAM_PATH}::helper", "optimized", base, new)
    gone = drift.compare(f"{UPSTREAM_PATH}::Toy.gone", "optimized", base, new)
    assert (same.status, diff.status, gone.status) == ("unchanged", "changed", "not in base")
    assert "-    d = c * 2" in diff.diff and "+    d = c * 3" in diff.diff
    removed = TextSource({UPSTREAM_PATH: UPSTREAM.replace("def forward(", "def renamed(")}, version="0.33.0")
    assert drift.compare(f"{UPSTREAM_PATH}::Toy.forward", "optimized", base, removed).status == "missing"
    spaced = TextSource({UPSTREAM_PATH: UPSTREAM.replace("c = a + b", "c = a  +  b")}, version="0.33.0")
    assert drift.compare(f"{UPSTREAM_PATH}::helper", "optimized", base, spaced).status == "whitespace"


def test_class_drift_ignores_its_methods():
    base = TextSource({UPSTREAM_PATH: UPSTREAM}, version="0.28.0")
    new = TextSource({UPSTREAM_PATH: UPSTREAM.replace("y = x * SCALE", "y = x / SCALE")}, version="0.33.0")
    assert drift.compare(f"{UPSTREAM_PATH}::Toy", "optimized", base, new).status == "unchanged"


# --------------------------------------------------------------------------- CLI


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["provenance", *argv])


@pytest.mark.parametrize("argv, message", [
    (["--against", "vllm=0.33"], "neither vllm==VERSION nor an existing path"),
    (["--legacy-source", "/no/such/wheel.whl"], "does not exist"),
    (["--optimized-source", __file__], "is not a .whl file"),
    (["--optimized-source", str(Path(__file__).parent)], "has no vllm/ package"),
    (["--legacy-diffs"], "--against"),
    (["--target", "glm4-embeddings"], "closest matches: glm4v-embeddings"),
    (["--cache", __file__], "is a file"),
])
def test_usage_errors_are_one_line_before_any_download(argv, message, tmp_path):
    args = parse("--cache", str(tmp_path / "empty-cache"), *argv)
    with pytest.raises(UsageError, match=message) as caught:
        cmd_provenance(args)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").iterdir())


def test_a_targets_copy_modules_bring_the_helper_modules_they_import():
    """--target checks the helpers copied beside the copies (they are copy modules, named by no target)."""
    assert verify.with_helper_modules("optimized", ["fla_index"]) == ["fla_index", "fla_utils", "gpu_sync_debug"]
    assert verify.with_helper_modules("legacy", ["fla_index"]) == ["fla_index", "fla_utils"]
    assert verify.with_helper_modules("legacy", ["diffusion_gemma"]) == ["diffusion_gemma", "torch_utils"]
    helpers = {"fla_utils", "gpu_sync_debug", "torch_utils"}
    for side in common.SIDES:
        # every helper module is reached from some target's copy module: none is left unchecked by --target
        reached = verify.with_helper_modules(side, sorted({verify.module_of(getattr(t, side)) for t in TARGETS}))
        assert reached == verify.copy_modules(ROOT, side)
        assert helpers & set(reached)


def test_provenance_is_wired_into_the_cli(capsys):
    from fuzz.cli import main

    code = main(["provenance", "--against", "vllm=0.33"])
    assert code == 2, "fuzz/cli.py must route `provenance` to fuzz.commands.provenance"
    assert "vllm==VERSION" in capsys.readouterr().err


# --------------------------------------------------------------------------- version pairs


SECOND = ("0.29.0", "0.30.0")


def _target(name: str, versions=DEFAULT_PAIR):
    return dataclasses.replace({t.name: t for t in TARGETS}[name], versions=versions)


def test_each_copy_module_takes_the_pair_of_the_targets_using_it():
    for side in common.SIDES:
        pairs = verify.module_pairs(TARGETS, side)
        assert pairs["v1_utils"] == SECOND  # the first target of a second pair (strategies/v1_utils/record.py)
        assert pairs["keye"] == pairs["torch_utils"] == pairs["fla_utils"] == DEFAULT_PAIR
    groups = verify.group_modules(TARGETS, {"legacy": ["keye", "v1_utils"], "optimized": ["v1_utils", "fla_utils"]})
    assert groups == {("legacy", DEFAULT_PAIR): ["keye"], ("legacy", SECOND): ["v1_utils"],
                      ("optimized", DEFAULT_PAIR): ["fla_utils"], ("optimized", SECOND): ["v1_utils"]}


def test_a_copy_module_used_by_two_pairs_is_a_usage_error():
    """A copy is checked against one release: a target of another pair sharing it is refused, by name."""
    moved = [*TARGETS, dataclasses.replace(_target("keye-vision-split", SECOND), name="keye-split-next")]
    with pytest.raises(UsageError, match=r"optimized/keye\.py, optimized/torch_utils\.py are used by targets of "
                                         r"two version pairs") as caught:
        verify.module_pairs(moved, "optimized")
    assert "0.29.0/0.30.0 by keye-split-next" in str(caught.value) and "\n" not in str(caught.value)
    assert "more; 0.29.0" in str(caught.value)  # the default pair's many users, abbreviated
    # Through a helper it imports too: diffusion_gemma's copies stage through torch_utils (async-tensor-h2d's).
    helper = [t for t in TARGETS if not t.name.startswith("diffusion-gemma")]
    helper.append(_target("diffusion-gemma-states", SECOND))
    with pytest.raises(UsageError, match=r"legacy/torch_utils\.py .*0\.27\.1/0\.28\.0 by async-tensor-h2d"):
        verify.module_pairs(helper, "legacy")


def test_the_target_record_validates_and_lists_its_pair():
    (target,) = [t for t in TARGETS if t.name == "cpu-gpu-buffer-copy-to-gpu"]
    assert target.versions == SECOND and target.as_json()["versions"] == {"legacy": "0.29.0", "optimized": "0.30.0"}
    assert _target("fla-chunk-offsets").as_json()["versions"] == dict(zip(common.SIDES, DEFAULT_PAIR))
    assert Target("t", (), "legacy.x:f", "optimized.x:f", "s:I", versions=["0.1", "0.2"]).versions == ("0.1", "0.2")
    with pytest.raises(HarnessError, match="versions="):
        Target("t", (), "legacy.x:f", "optimized.x:f", "s:I", versions=("0.29.0",))


def test_drift_measures_each_target_from_its_own_release():
    ref = f"{UPSTREAM_PATH}::helper"
    new_text = UPSTREAM.replace("d = c * 2", "d = c * 3")  # changed in 0.30.0
    sources = {v: TextSource({UPSTREAM_PATH: new_text if v == "0.30.0" else UPSTREAM}, v)
               for v in ("0.27.1", "0.28.0", "0.29.0", "0.30.0")}
    changed = TextSource({UPSTREAM_PATH: new_text}, "0.33.0")
    first = argparse.Namespace(name="first", upstream=(ref,), versions=DEFAULT_PAIR)
    second = argparse.Namespace(name="second", upstream=(ref,), versions=SECOND)
    drifts = drift.drift_report([first, second], sources, changed)
    got = {(d.side, d.base_version, tuple(d.owners)): d.status for d in drifts}
    assert got == {("optimized", "0.28.0", ("first",)): "changed", ("optimized", "0.30.0", ("second",)): "unchanged",
                   ("legacy", "0.27.1", ("first",)): "changed", ("legacy", "0.29.0", ("second",)): "changed"}
    text = "\n".join(drift.format_drift(drifts, changed))
    assert "optimized side (copied from vllm 0.28.0)" in text and "optimized side (copied from vllm 0.30.0)" in text
    assert "optimized copies to refresh: first" in text  # the second target's optimized copy is current


def test_a_side_source_flag_stands_for_the_one_pair_in_play(tmp_path):
    """--legacy-source replaces the default pair's release, or the only pair --target brings in."""
    (tmp_path / "vllm").mkdir()
    given = dict(side_sources={"legacy": str(tmp_path)}, version_sources=[f"0.30.0={tmp_path}"])
    both = prov._given_sources([DEFAULT_PAIR, SECOND], [*DEFAULT_PAIR, *SECOND], **given)
    assert sorted(both) == ["0.27.1", "0.30.0"]
    assert sorted(prov._given_sources([SECOND], SECOND, **given)) == ["0.29.0", "0.30.0"]
    with pytest.raises(UsageError, match="VERSION=PATH"):
        prov._given_sources([DEFAULT_PAIR], DEFAULT_PAIR, side_sources={}, version_sources=[str(tmp_path)])


def test_a_source_for_a_release_no_copy_came_from_is_refused(tmp_path):
    """--source 9.9.9=PATH would be opened and never used: a silent success."""
    (tmp_path / "vllm").mkdir()
    with pytest.raises(UsageError, match=r"none of the copies checked was taken from vllm 9\.9\.9 \(they come from "
                                         r"0\.27\.1, 0\.28\.0\)"):
        prov._given_sources([DEFAULT_PAIR], DEFAULT_PAIR, side_sources={}, version_sources=[f"9.9.9={tmp_path}"])


# --------------------------------------------------------------------------- the real copies and wheels


def _release(version: str) -> release_sources.Source:
    """vllm ``version``: $SYNCFUZZ_<SIDE>_SOURCE for the default pair, else the repo's source pack or the
    cached wheel, else a pip download; a skip without network."""
    for side in common.SIDES:
        given = os.environ.get(f"SYNCFUZZ_{side.upper()}_SOURCE")
        if given and common.SIDE_VERSIONS[side] == version:
            return release_sources.open_source(given, f"SYNCFUZZ_{side.upper()}_SOURCE")
    cache = common.default_cache()
    try:
        # Few, short retries: on a host without network (the GPU hosts) this must skip fast.
        return packs.default_source(version, cache, quiet=True, pip_args=("--retries", "1", "--timeout", "15"))
    except UsageError as exc:
        pytest.skip(f"vllm {version} is in no source pack nor in {cache} and could not be downloaded: {exc}")


def _pairs(side: str) -> dict[str, tuple[str, str]]:
    """Each copy module of ``side`` -> its version pair (module_pairs read once: it parses every copy)."""
    used = verify.module_pairs(TARGETS, side)
    return {m: used.get(m, DEFAULT_PAIR) for m in verify.copy_modules(ROOT, side)}


PAIRS = {side: _pairs(side) for side in common.SIDES}


@pytest.fixture(scope="module")
def releases() -> dict[str, release_sources.Source]:
    """Every release a copy module was taken from, by version."""
    versions = {common.side_version(pair, side) for side in common.SIDES for pair in PAIRS[side].values()}
    return {version: _release(version) for version in sorted(versions, key=common.version_key)}


def _path_of(source: release_sources.Source) -> str:
    """A path ``open_source`` reads the same files from (a pack's folder, a tree's root, a wheel)."""
    return str(getattr(source, "folder", None) or getattr(source, "root", None) or source.label)


def copy_text(side: str, module: str) -> str:
    return (ROOT / side / f"{module}.py").read_text(encoding="utf-8")


def check_real(releases, side: str, module: str, text: str) -> matching.ModuleReport:
    """One copy module (or an edit of it) against the release of its targets' pair."""
    files = verify.upstream_files_by_module(TARGETS)[module]
    source = releases[common.side_version(PAIRS[side][module], side)]
    return check_copy(f"{side}/{module}.py", text, source, files, side)


@pytest.mark.slow  # needs the vllm wheels (a ~640 MB download on a fresh host)
def test_fla_copies_verify(releases):
    for side in common.SIDES:
        report = check_real(releases, side, "fla_index", copy_text(side, "fla_index"))
        assert report.ok, "\n".join(line for u in report.failed for line in u.diff)


@pytest.mark.slow  # needs the vllm wheels (a ~640 MB download on a fresh host)
def test_a_planted_edit_of_a_real_copy_is_caught(releases):
    text = copy_text("optimized", "fla_index")
    planted_text = text.replace("cu_seqlens.new_zeros(1)", "cu_seqlens.new_ones(1)")
    assert planted_text != text
    report = check_real(releases, "optimized", "fla_index", planted_text)
    bad = unit(report, "prepare_chunk_offsets")
    assert not report.ok and not bad.ok
    assert any("new_ones(1)" in line for line in bad.diff)


_BASES: dict[str, matching.ModuleReport] = {}


def _base_report(releases, module: str) -> matching.ModuleReport:
    """The unmodified optimized copy's report, once per module (the mutant must add failures to it)."""
    if module not in _BASES:
        _BASES[module] = check_real(releases, "optimized", module, copy_text("optimized", module))
    return _BASES[module]


PLANTS = {p.name: p for p in [*planted.BUGS, *planted.BENIGN, *planted.SYNC_BUGS, *planted.STRESS_BUGS]}


@pytest.mark.slow  # needs the vllm wheels
@pytest.mark.parametrize("name", sorted(PLANTS))
def test_every_planted_mutant_is_caught(name, releases):
    """Each one-edit mutant of tests/planted departs from upstream: provenance must say so.

    Unless the edit only touches lines already marked ADAPTED (e.g. a helper import),
    which by definition are not upstream text.
    """
    plant = PLANTS[name]
    module = plant.module.split(".", 1)[1]
    text = copy_text("optimized", module)
    assert text.count(plant.old) == 1
    mutant = text.replace(plant.old, plant.new)
    start = text.index(plant.old)
    first = text.count("\n", 0, start) + 1
    rows = range(first, first + plant.old.count("\n") + 1)
    facts = matching.CopyLines.from_text(text)
    if all(row in facts.adapted for row in rows):
        pytest.skip(f"{name} edits ADAPTED lines only (rows {list(rows)}), which are not upstream text")
    base = _base_report(releases, module)
    report = check_real(releases, "optimized", module, mutant)
    assert report.mismatched + report.dropped > base.mismatched + base.dropped, f"{name}: {plant.why}"


@pytest.mark.slow  # needs the vllm wheels (a ~640 MB download on a fresh host)
def test_every_target_definition_verifies(releases):
    groups = verify.group_modules(TARGETS, {side: verify.copy_modules(ROOT, side) for side in common.SIDES})
    reports = [r for (side, pair), modules in groups.items()
               for r in verify.check_side(side, releases[common.side_version(pair, side)], TARGETS, modules, pair=pair)]
    failing = [f"{row.name} {row.side}: {ref}" for row in verify.target_rows(TARGETS, reports)
               for ref, u in row.covered if u is not None and not u.ok]
    assert not failing, failing


@pytest.mark.slow  # needs the vllm wheels (a ~640 MB download on a fresh host)
def test_every_copy_line_verifies(releases, capsys):
    """The acceptance check: `python -m fuzz provenance` exits 0 on the real copies, each checked
    against the release of its own targets' version pair."""
    given = [f"{version}={_path_of(source)}" for version, source in releases.items()]
    args = parse(*[arg for spec in given for arg in ("--source", spec)])
    code = cmd_provenance(args)
    out = capsys.readouterr().out
    assert code == 0, out[out.find("mismatches:"):] if "mismatches:" in out else out
    for target in TARGETS:
        assert target.name in out
    for version in releases:  # every release in play is named in a header line
        assert f"copies vs vllm {version} (" in out


# --------------------------------------------------------------------------- --against from source packs


def _no_download(monkeypatch):
    def refuse(version, *args, **kwargs):
        raise AssertionError(f"downloaded vllm=={version} though a source pack has it")

    monkeypatch.setattr(packs, "fetch_wheel", refuse)


def test_against_a_release_with_a_shipped_pack_reads_the_pack_not_a_wheel(monkeypatch, tmp_path, capsys):
    _no_download(monkeypatch)
    args = parse("--cache", str(tmp_path / "empty-cache"), "--target", "fla-chunk-offsets", "--against", "vllm==0.30.0")
    assert cmd_provenance(args) in (0, 1)  # unchanged or drift: either way read offline
    assert "source pack" in capsys.readouterr().out


def test_against_resolves_from_sources_and_the_environment_before_any_download(monkeypatch, tmp_path):
    from fuzz.releases.packs import SHIPPED_PACKS, SOURCES_ENV

    pack = tmp_path / "packs" / "vllm-0.39.0"  # a release no folder but this one has
    shutil.copytree(SHIPPED_PACKS / "vllm-0.30.0", pack)
    manifest = json.loads((pack / "MANIFEST.json").read_text())
    (pack / "MANIFEST.json").write_text(json.dumps({**manifest, "version": "0.39.0"}))
    _no_download(monkeypatch)
    monkeypatch.delenv(SOURCES_ENV, raising=False)
    argv = ("--cache", str(tmp_path / "empty-cache"), "--target", "fla-chunk-offsets", "--against", "vllm==0.39.0")
    assert cmd_provenance(parse(*argv, "--sources", str(tmp_path / "packs"))) in (0, 1)
    monkeypatch.setenv(SOURCES_ENV, str(tmp_path / "packs"))
    assert cmd_provenance(parse(*argv)) in (0, 1)
    monkeypatch.delenv(SOURCES_ENV)
    with pytest.raises(AssertionError, match="downloaded vllm==0.39.0"):  # no pack anywhere: the download
        cmd_provenance(parse(*argv))
    with pytest.raises(UsageError, match="--sources '/no/such' is not a directory"):
        cmd_provenance(parse(*argv, "--sources", "/no/such"))


# --------------------------------------------------------------------------- download lines


def _pip_fails(monkeypatch) -> list[list[str]]:
    """pip as an offline host runs it: no download happens; the commands asked for are recorded."""
    import subprocess

    from fuzz.releases import sources as release_sources_module

    asked: list[list[str]] = []

    def pip(command, **kwargs):
        asked.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found for vllm==9.9.9")

    monkeypatch.setattr(release_sources_module.subprocess, "run", pip)
    return asked


@pytest.mark.parametrize(("argv", "label", "instead"), [
    (["sources", "fetch", "vllm==9.9.9"], "[sources]", "sources fetch PATH"),
    (["new-target", "my-new-target", "--upstream", "vllm/v1/utils.py::CpuGpuBuffer.copy_to_gpu",
      "--legacy-version", "9.9.8", "--optimized-version", "9.9.9", "--module", "not_here_yet"],
     "[new-target]", "--legacy-source/--optimized-source PATH"),
])
def test_a_download_is_labelled_by_the_command_that_downloads(argv, label, instead, monkeypatch, tmp_path, capsys):
    from fuzz.cli import main

    asked = _pip_fails(monkeypatch)
    monkeypatch.delenv("SYNCFUZZ_SOURCES", raising=False)
    cache = ["--cache", str(tmp_path / "cache")]
    into = ["--into", str(tmp_path / "packs")] if argv[0] == "sources" else []
    assert main([*argv, *cache, *into]) == 2
    err = capsys.readouterr().err
    assert f"{label} downloading vllm==9.9." in err and "[provenance]" not in err
    assert err.strip().splitlines()[-1].startswith("fuzz: error: could not download vllm==9.9.")
    assert instead in err and asked and all("pip" in command for command in asked)
