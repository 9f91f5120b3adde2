"""The bad-input table: every subcommand, one id per mistake (issue #24).

Each case is run in-process through ``fuzz.cli.main`` in a folder holding a
corpus with a saved repro file, a known-issues file, a report and a few other
files. Every case must exit 2 with exactly one stderr line ``fuzz: error:
...``, print no traceback, start no work (the functions that fuzz, replay,
write outputs, download or scaffold raise if reached) and leave every file
that was there byte-identical, with none added.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Callable

import pytest

import fuzz.cli
from fuzz.cli import main

TARGET = "fla-chunk-offsets"
REPRO_NAME = f"{TARGET}-divergence-000000000000.json"


def _repro(**changes) -> dict:
    payload = {"format": "syncfuzz-repro/1", "target": TARGET, "input": {"device": "cpu", "cu_seqlens": [0, 3],
               "dtype": "int32", "chunk_size": 2}, "device": "cpu", "contract": "caller", "verdict": "divergence",
               "seed": 0}
    payload.update(changes)
    return payload


def _known(**changes) -> dict:
    issue = {"target": TARGET, "verdict": "divergence", "reason": "accepted", **changes}
    return {"format": "syncfuzz-known-issues/1", "issues": [issue]}


@pytest.fixture(scope="module")
def report_bytes(tmp_path_factory) -> bytes:
    """A real report of this format: one in-process run of one example."""
    folder = tmp_path_factory.mktemp("report")
    code = main(["run", "--target", TARGET, "--device", "cpu", "--max-examples", "1", "--in-process", "--quiet",
                 "--confirm", "0", "--seed", "0", "--corpus", str(folder / "corpus"),
                 "--report", str(folder / "report.json")])
    assert code == 0
    return (folder / "report.json").read_bytes()


@pytest.fixture
def world(tmp_path, report_bytes) -> Path:
    return make_world(tmp_path, report_bytes)


def make_world(tmp_path: Path, report_bytes: bytes) -> Path:
    """The files a user already has: none of them may change."""
    (tmp_path / "corpus" / "failures").mkdir(parents=True)
    (tmp_path / "corpus" / "hypothesis").mkdir()
    (tmp_path / "corpus" / "failures" / REPRO_NAME).write_text(json.dumps(_repro()))
    (tmp_path / "known.json").write_text(json.dumps(_known()))
    (tmp_path / "report.json").write_bytes(report_bytes)
    os.link(tmp_path / "report.json", tmp_path / "report-hardlink.json")
    (tmp_path / "notes.txt").write_text("my notes, not an output\n")
    (tmp_path / "data.json").write_text(json.dumps({"anything": [1, 2, 3]}))
    (tmp_path / "data.pkl").write_bytes(pickle.dumps({"a": 1}))
    (tmp_path / "fake.whl").write_bytes(b"not a zip")
    (tmp_path / "nocache").mkdir()
    return tmp_path


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


class WorkStarted(AssertionError):
    """A refused case reached real work."""


@pytest.fixture
def no_work(monkeypatch):
    """Every entry point of real work raises: a case must be refused before it."""
    import fuzz.commands.corpusmerge
    import fuzz.commands.mergereports
    import fuzz.releases.packs
    import fuzz.releases.scaffold
    import fuzz.releases.sources
    import fuzz.run.orchestrate
    import fuzz.run.replay
    import fuzz.run.selftest
    import fuzz.run.session
    import fuzz.run.workers

    def started(*args, **kwargs):
        raise WorkStarted("work started for a case that should have been refused")

    for module, name in [(fuzz.run.orchestrate, "fuzz_all"), (fuzz.run.workers, "run_with_xdist"),
                         (fuzz.run.replay, "replay_file"), (fuzz.commands.mergereports, "write_outputs"),
                         (fuzz.run.session, "write_outputs"),
                         (fuzz.run.selftest, "selftest_target"), (fuzz.releases.packs, "write_pack"),
                         (fuzz.releases.packs, "fetch_wheel"), (fuzz.releases.sources, "fetch_wheel"),
                         (fuzz.releases.scaffold, "write"), (fuzz.commands.corpusmerge, "write_merge")]:
        monkeypatch.setattr(module, name, started)
    # No downloads and no user cache: releases resolve from the packs shipped in sources/ only.
    monkeypatch.delenv("SYNCFUZZ_SOURCES", raising=False)
    monkeypatch.delenv("SYNCFUZZ_LEGACY_SOURCE", raising=False)
    monkeypatch.delenv("SYNCFUZZ_OPTIMIZED_SOURCE", raising=False)


Case = Callable[[Path], list[str]]


def run(*extra: str | Callable[[Path], str]) -> Case:
    """``fuzz run`` of one example on the CPU in the world's corpus, plus ``extra`` (str or world -> str)."""
    def argv(w: Path) -> list[str]:
        tail = [e(w) if callable(e) else e for e in extra]
        return ["run", "--target", TARGET, "--device", "cpu", "--max-examples", "1", "--in-process", "--quiet",
                "--confirm", "0", "--corpus", str(w / "corpus"), *tail]
    return argv


def cmd(*args: str | Callable[[Path], str]) -> Case:
    return lambda w: [a(w) if callable(a) else a for a in args]


def at(name: str) -> Callable[[Path], str]:
    """A path in the world."""
    return lambda w: str(w / name)


def write(name: str, content: bytes | str | dict | list) -> Callable[[Path], str]:
    """A file made for the case (after the snapshot is taken it must not change either)."""
    def make(w: Path) -> str:
        path = w / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, (dict, list)):
            path.write_text(json.dumps(content))
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
        return str(path)
    return make


def folder(name: str) -> Callable[[Path], str]:
    def make(w: Path) -> str:
        (w / name).mkdir(parents=True, exist_ok=True)
        return str(w / name)
    return make


def symlink(name: str, to: str) -> Callable[[Path], str]:
    def make(w: Path) -> str:
        (w / name).symlink_to(w / to)
        return str(w / name)
    return make


# issue 45: no silent successes (helpers of the provenance and new-target cases)
SHIPPED_REF = "vllm/v1/utils.py::CpuGpuBuffer.copy_to_gpu"  # in the packs of sources/ (0.29.0, 0.30.0)


def vllm_tree(name: str) -> Callable[[Path], str]:
    """A folder holding vllm/: a source that opens."""
    def make(w: Path) -> str:
        (w / name / "vllm").mkdir(parents=True, exist_ok=True)
        return str(w / name)
    return make


def checkout_naming(target: str) -> Callable[[Path], str]:
    """Another syncfuzz checkout whose catalog already has ``target``."""
    def make(w: Path) -> str:
        root = w / "other-checkout"
        for sub in ("legacy", "optimized", "strategies/theirs", "tests/unit"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "strategies" / "theirs" / "record.py").write_text(f'TARGETS = [Target(name="{target}")]\n')
        return str(root)
    return make


def with_corpus_file(sub: str) -> Case:
    """The corpus has a regular file where the run keeps a folder."""
    def argv(w: Path) -> list[str]:
        path = w / "corpus" / sub
        if path.is_dir():
            shutil.rmtree(path)
        path.write_text("in the way")
        return run()(w)
    return argv


def replay(content: bytes | dict | list, *extra: str) -> Case:
    return cmd("replay", write("bad-repro.json", content), *extra)


def repro_folder(name: str, files: dict[str, bytes | dict]) -> Callable[[Path], str]:
    """A folder made for the case, holding ``files``."""
    def make(w: Path) -> str:
        for file, content in files.items():
            write(f"{name}/{file}", content)(w)
        return str(w / name)
    return make


def merge_in(content: bytes | str | dict | list) -> Case:
    return cmd("merge-reports", at("merged.json"), write("in.json", content))


def shard_with(inside: str, content: bytes | str | dict) -> Callable[[Path], str]:
    """A shard's corpus folder ``shard/`` holding ``inside`` (for corpus-merge): its path."""
    return lambda w: (write(f"shard/{inside}", content)(w), str(w / "shard"))[1]


def part_of_the_report(name: str, shard: tuple[int, int], merged: bool = False) -> Callable[[Path], str]:
    """The world's report as shard ``shard`` of its run (``merged``: as merge-reports writes a merge of that
    shard alone, missing the others)."""
    def make(w: Path) -> str:
        data = json.loads((w / "report.json").read_text())
        scope = data["run"]["scope"]
        if merged:
            scope.update(covers=[{"run_id": scope["run_id"], "shard": list(shard)}], shard_count=shard[1],
                         covered=[shard[0]], complete=False,
                         missing=[i for i in range(1, shard[1] + 1) if i != shard[0]])
        else:
            scope["shard"] = list(shard)
        (w / name).write_text(json.dumps(data))
        return str(w / name)
    return make


REPRO = f"corpus/failures/{REPRO_NAME}"
ENV: dict[str, dict[str, str | Callable[[Path], str]]] = {}  # case id -> environment variables


def env(name: str, case: Case, **variables: str | Callable[[Path], str]) -> tuple[str, Case]:
    ENV[name] = variables
    return name, case


CASES: dict[str, Case] = dict([
    # ----------------------------------------------------------------- the top level
    ("no-command", cmd()),
    ("unknown-command", cmd("fuzzz")),
    ("unknown-top-flag", cmd("--frobnicate")),
    ("list-unknown-flag", cmd("list", "--frobnicate")),
    ("list-extra-argument", cmd("list", "extra")),
    env("env-target-modules-missing", cmd("list"), SYNCFUZZ_TARGET_MODULES="no_such_module_xyz"),
    env("env-threads-not-a-number", run(), SYNCFUZZ_THREADS="abc"),
    env("env-threads-zero", run(), SYNCFUZZ_THREADS="0"),
    env("env-pageable-bytes-not-a-number", run(), SYNCFUZZ_PAGEABLE_STAGED_BYTES="2MB"),
    env("env-sources-missing", run(), SYNCFUZZ_SOURCES="/missing-syncfuzz-sources"),
    env("env-sources-a-file", run(), SYNCFUZZ_SOURCES=at("notes.txt")),
    env("env-wheel-cache-a-file", cmd("provenance"), SYNCFUZZ_WHEEL_CACHE=at("notes.txt")),
    env("env-legacy-source-missing", cmd("provenance"), SYNCFUZZ_LEGACY_SOURCE="/missing-vllm-checkout"),
    # ----------------------------------------------------------------- run: flags and values
    ("run-unknown-target", run("--target", "fla-chunk-offset")),
    ("run-empty-target", run("--target", "")),
    ("run-max-examples-zero", run("--max-examples", "0")),
    ("run-max-examples-negative", run("--max-examples", "-3")),
    ("run-max-examples-not-a-number", run("--max-examples", "many")),
    ("run-max-examples-fraction", run("--max-examples", "1.5")),
    ("run-max-examples-and-budget", run("--budget", "5")),
    ("run-budget-zero", cmd("run", "--target", TARGET, "--budget", "0")),
    ("run-budget-negative", cmd("run", "--target", TARGET, "--budget", "-5")),
    ("run-budget-nan", cmd("run", "--target", TARGET, "--budget", "nan")),
    ("run-budget-infinite", cmd("run", "--target", TARGET, "--budget", "inf")),
    ("run-budget-not-a-number", cmd("run", "--target", TARGET, "--budget", "1h")),
    ("run-seed-negative", run("--seed", "-1")),
    ("run-seed-too-large", run("--seed", str(2**63))),
    ("run-seed-not-a-number", run("--seed", "zero")),
    ("run-unknown-device", run("--device", "tpu")),
    ("run-unknown-contract", run("--contract", "loose")),
    ("run-unknown-profile", run("--profile", "weekly")),
    ("run-workers-zero", run("--workers", "0")),
    ("run-pieces-zero", run("--pieces", "0")),
    ("run-pieces-not-a-number", run("--pieces", "four")),
    ("run-shard-zero", run("--shard", "0/2")),
    ("run-shard-beyond-count", run("--shard", "3/2")),
    ("run-shard-count-zero", run("--shard", "1/0")),
    ("run-shard-letters", run("--shard", "a/b")),
    ("run-shard-empty", run("--shard", "")),
    ("run-shard-dash", run("--shard", "1-2")),
    ("run-shard-leaves-nothing", run("--shard", "2/2")),
    ("run-example-timeout-zero", run("--example-timeout", "0")),
    ("run-example-timeout-too-short", run("--example-timeout", "0.001")),
    ("run-example-timeout-nan", run("--example-timeout", "nan")),
    ("run-max-restarts-negative", run("--max-restarts", "-1")),
    ("run-max-restarts-not-a-number", run("--max-restarts", "x")),
    ("run-confirm-negative", run("--confirm", "-1")),
    ("run-confirm-not-a-number", run("--confirm", "twice")),
    ("run-unknown-flag", run("--frobnicate")),
    # ----------------------------------------------------------------- run: output paths
    ("run-report-empty", run("--report", "")),
    ("run-report-a-folder", run("--report", at("corpus"))),
    ("run-report-in-proc", run("--report", "/proc/syncfuzz-report.json")),
    ("run-report-under-a-file", run("--report", lambda w: str(w / "notes.txt" / "r.json"))),
    ("run-report-folder-missing", run("--report", at("no/such/folder/r.json"))),
    ("run-markdown-in-proc", run("--markdown", "/proc/syncfuzz.md")),
    ("run-junit-a-folder", run("--junit", at("corpus"))),
    ("run-markdown-empty", run("--markdown", "")),
    ("run-report-over-a-saved-repro", run("--report", at(REPRO))),
    ("run-report-over-known-issues", run("--report", at("known.json"))),
    ("run-report-over-random-json", run("--report", at("data.json"))),
    ("run-report-over-a-text-file", run("--report", at("notes.txt"))),
    ("run-report-over-a-pickle", run("--report", at("data.pkl"))),
    ("run-report-and-markdown-same-file", run("--report", at("out.json"), "--markdown", at("out.json"))),
    ("run-report-and-junit-same-file", run("--report", at("out.json"), "--junit", at("out.json"))),
    ("run-markdown-and-junit-same-file", run("--markdown", at("out.md"), "--junit", at("out.md"))),
    ("run-outputs-same-file-spelt-differently", run("--markdown", at("out.md"), "--junit", at("corpus/../out.md"))),
    ("run-outputs-same-file-through-a-link", run("--markdown", at("out.md"), "--junit", symlink("alias.md", "out.md"))),
    ("run-markdown-over-known-issues", run("--markdown", at("known.json"))),
    ("run-junit-over-a-saved-repro", run("--junit", at(REPRO))),
    ("run-markdown-over-a-report", run("--markdown", at("report.json"))),
    ("run-junit-over-a-pickle", run("--junit", at("data.pkl"))),
    ("run-report-is-known-issues", run("--report", at("report.json"), "--known-issues", at("report.json"))),
    ("run-report-hard-link-of-known-issues", run("--report", at("report.json"),
                                                  "--known-issues", at("report-hardlink.json"))),
    ("run-report-is-the-corpus", run("--corpus", at("newcorpus"), "--report", at("newcorpus"))),
    ("run-report-in-corpus-failures", run("--report", at("corpus/failures/new-report.json"))),
    ("run-report-in-corpus-hypothesis", run("--report", at("corpus/hypothesis/r.json"))),
    ("run-markdown-in-corpus-journal", run("--markdown", lambda w: folder("corpus/journal")(w) + "/r.md")),
    ("run-report-over-the-legacy-wheel", run("--legacy", at("fake.whl"), "--report", at("fake.whl"))),
    # ----------------------------------------------------------------- run: corpus
    ("run-corpus-empty", run("--corpus", "")),
    ("run-corpus-blank", run("--corpus", "  ")),
    ("run-corpus-a-file", run("--corpus", at("notes.txt"))),
    ("run-corpus-under-a-file", run("--corpus", lambda w: str(w / "notes.txt" / "corpus"))),
    ("run-corpus-in-proc", run("--corpus", "/proc/syncfuzz-corpus")),
    ("run-corpus-hypothesis-a-file", with_corpus_file("hypothesis")),
    ("run-corpus-journal-a-file", with_corpus_file("journal")),
    ("run-corpus-failures-a-file", with_corpus_file("failures")),
    # ----------------------------------------------------------------- run: known issues
    ("run-known-issues-missing", run("--known-issues", at("absent.json"))),
    ("run-known-issues-a-folder", run("--known-issues", at("corpus"))),
    ("run-known-issues-empty-path", run("--known-issues", "")),
    ("run-known-issues-not-json", run("--known-issues", at("notes.txt"))),
    ("run-known-issues-pickle", run("--known-issues", at("data.pkl"))),
    ("run-known-issues-a-list", run("--known-issues", write("k.json", [1, 2]))),
    ("run-known-issues-wrong-format", run("--known-issues", write("k.json", {**_known(), "format": "x/1"}))),
    ("run-known-issues-issues-not-a-list", run("--known-issues", write("k.json", {**_known(), "issues": {}}))),
    ("run-known-issues-no-reason", run("--known-issues", write("k.json", {"format": "syncfuzz-known-issues/1",
                                                                          "issues": [{"target": TARGET,
                                                                                      "verdict": "divergence"}]}))),
    ("run-known-issues-empty-reason", run("--known-issues", write("k.json", _known(reason=" ")))),
    ("run-known-issues-unknown-key", run("--known-issues", write("k.json", _known(severity="high")))),
    ("run-known-issues-misspelt-target", run("--known-issues", write("k.json", _known(target="fla-chunk-offset")))),
    ("run-known-issues-misspelt-verdict", run("--known-issues", write("k.json", _known(verdict="divergance")))),
    ("run-known-issues-bad-contract", run("--known-issues", write("k.json", _known(contract="callers")))),
    ("run-known-issues-issue-not-an-object", run("--known-issues", write("k.json", {"format":
                                                                                   "syncfuzz-known-issues/1",
                                                                                   "issues": ["x"]}))),
    # ----------------------------------------------------------------- run: sides and sources
    ("run-sources-missing", run("--sources", "/missing-syncfuzz-sources")),
    ("run-sources-empty", run("--sources", "")),
    ("run-sources-a-file", run("--sources", at("notes.txt"))),
    ("run-legacy-empty", run("--legacy", "")),
    ("run-legacy-missing-path", run("--legacy", "/missing-vllm-checkout")),
    ("run-legacy-unknown-release", run("--legacy", "vllm==9.9.9")),
    # issue 45, a second bad-input pass: one code on both sides is same-code everywhere, no evidence
    ("run-legacy-and-optimized-same-release", run("--legacy", "vllm==0.28.0", "--optimized", "vllm==0.28.0")),
    ("run-legacy-and-optimized-same-path", run("--legacy", lambda w: str(Path(write("tree/vllm/__init__.py", "")(w))
                                                                             .parents[1]),
                                               "--optimized", at("tree"))),
    ("run-optimized-a-text-file", run("--optimized", at("notes.txt"))),
    ("run-optimized-not-a-wheel", run("--optimized", at("fake.whl"))),
    ("run-optimized-folder-without-vllm", run("--optimized", at("nocache"))),
    # ----------------------------------------------------------------- replay
    ("replay-no-file", cmd("replay")),
    ("replay-missing-file", cmd("replay", at("absent.json"))),
    ("replay-a-folder", cmd("replay", at("corpus"))),
    ("replay-empty-path", cmd("replay", "")),
    ("replay-unknown-device-flag", cmd("replay", at(REPRO), "--device", "tpu")),
    ("replay-empty-file", replay(b"")),
    ("replay-not-json", replay(b"{not json")),
    ("replay-truncated", replay(json.dumps(_repro()).encode()[:40])),
    ("replay-binary", replay(b"\xff\xfe\x00garbage")),
    ("replay-pickle", replay(pickle.dumps(_repro()))),
    ("replay-zip", replay(b"PK\x03\x04rest")),
    ("replay-json-list", replay([1, 2])),
    ("replay-json-string", replay(b'"a repro"')),
    ("replay-wrong-format", replay(_repro(format="syncfuzz-repro/0"))),
    ("replay-no-format", replay({k: v for k, v in _repro().items() if k != "format"})),
    ("replay-no-target", replay({k: v for k, v in _repro().items() if k != "target"})),
    ("replay-target-not-a-string", replay(_repro(target=7))),
    ("replay-input-not-an-object", replay(_repro(input=[1]))),
    ("replay-input-without-device", replay(_repro(input={"cu_seqlens": [0]}))),
    ("replay-no-verdict", replay({k: v for k, v in _repro().items() if k != "verdict"})),
    ("replay-unknown-verdict", replay(_repro(verdict="banana"))),
    ("replay-verdict-not-a-string", replay(_repro(verdict=1))),
    ("replay-bad-contract", replay(_repro(contract="loose"))),
    ("replay-unknown-target", replay(_repro(target="fla-chunk-offset"))),
    ("replay-untrusted-target-module", replay(_repro(target_module="this"))),
    ("replay-target-module-not-a-string", replay(_repro(target_module=3))),
    ("replay-device-tpu", replay(_repro(device="tpu"))),
    ("replay-input-device-tpu", replay(_repro(input={**_repro()["input"], "device": "tpu"}))),
    ("replay-device-tpu-on-cpu-flag", replay(_repro(device="tpu", input={**_repro()["input"], "device": "tpu"}),
                                             "--device", "cpu")),
    ("replay-device-not-a-string", replay(_repro(device=0))),
    ("replay-devices-disagree", replay(_repro(device="cuda"))),
    ("replay-config-unknown-key", replay(_repro(config={"seed": 0, "frobnicate": 1}))),
    ("replay-config-wrong-type", replay(_repro(config={"stress": "yes"}))),
    ("replay-config-not-an-object", replay(_repro(config=[1]))),
    # issue 45: replay for the fix-and-recheck loop
    ("replay-known-issues-missing", cmd("replay", at(REPRO), "--known-issues", at("absent.json"))),
    ("replay-known-issues-empty", cmd("replay", at(REPRO), "--known-issues", "")),
    ("replay-known-issues-a-folder", cmd("replay", at(REPRO), "--known-issues", at("corpus"))),
    ("replay-known-issues-not-json", cmd("replay", at(REPRO), "--known-issues", at("notes.txt"))),
    ("replay-known-issues-a-repro", cmd("replay", at(REPRO), "--known-issues", at(REPRO))),
    ("replay-known-issues-unknown-target", cmd("replay", at(REPRO), "--known-issues",
                                               write("typo.json", _known(target="fla-chunk-offset")))),
    ("replay-folder-known-issues-missing", cmd("replay", at("corpus/failures"), "--known-issues", at("absent.json"))),
    ("replay-folder-nothing-replayable", cmd("replay", repro_folder("unusable", {
        "truncated.json": b'{"format": "syncfuzz-repro/1", "tar', "typo.json": _repro(target="fla-chunk-offset"),
        "pickle.json": pickle.dumps(_repro())}))),
    ("replay-folder-strict-one-bad-file", cmd("replay", repro_folder("mixed", {
        REPRO_NAME: _repro(), "typo.json": _repro(target="fla-chunk-offset")}), "--strict")),
    # ----------------------------------------------------------------- merge-reports
    ("merge-no-arguments", cmd("merge-reports")),
    ("merge-no-inputs", cmd("merge-reports", at("merged.json"))),
    ("merge-input-missing", cmd("merge-reports", at("merged.json"), at("absent.json"))),
    ("merge-input-a-folder", cmd("merge-reports", at("merged.json"), at("corpus"))),
    ("merge-input-not-json", merge_in("not json")),
    ("merge-input-binary", merge_in(b"\xff\xfe\x00")),
    ("merge-input-a-list", merge_in([1])),
    ("merge-input-wrong-format", merge_in({"format": "syncfuzz-report/1", "targets": []})),
    ("merge-input-a-repro", cmd("merge-reports", at("merged.json"), at(REPRO))),
    ("merge-input-known-issues", cmd("merge-reports", at("merged.json"), at("known.json"))),
    ("merge-input-no-targets", merge_in({"format": "syncfuzz-report/2", "run": {}, "versions": {}})),
    ("merge-same-report-twice", cmd("merge-reports", at("merged.json"), at("report.json"), at("report.json"))),
    ("merge-out-among-inputs", cmd("merge-reports", at("report.json"), at("report.json"))),
    ("merge-out-hard-link-of-an-input", cmd("merge-reports", at("report-hardlink.json"), at("report.json"))),
    ("merge-out-over-a-repro", cmd("merge-reports", at(REPRO), at("report.json"))),
    ("merge-out-over-known-issues", cmd("merge-reports", at("known.json"), at("report.json"))),
    ("merge-out-over-a-text-file", cmd("merge-reports", at("notes.txt"), at("report.json"))),
    ("merge-out-empty", cmd("merge-reports", "", at("report.json"))),
    ("merge-out-a-folder", cmd("merge-reports", at("corpus"), at("report.json"))),
    ("merge-out-in-proc", cmd("merge-reports", "/proc/merged.json", at("report.json"))),
    ("merge-markdown-is-an-input", cmd("merge-reports", at("merged.json"), at("report.json"),
                                       "--markdown", at("report.json"))),
    ("merge-markdown-and-junit-same-file", cmd("merge-reports", at("merged.json"), at("report.json"),
                                               "--markdown", at("m.md"), "--junit", at("m.md"))),
    ("merge-out-and-markdown-same-file", cmd("merge-reports", at("merged.json"), at("report.json"),
                                             "--markdown", at("merged.json"))),
    # issue 45: a nightly across hosts (corpus-merge OUT_CORPUS SHARD_CORPUS...)
    ("corpus-merge-no-arguments", cmd("corpus-merge")),
    ("corpus-merge-no-inputs", cmd("corpus-merge", at("merged-corpus"))),
    ("corpus-merge-input-missing", cmd("corpus-merge", at("merged-corpus"), at("absent-corpus"))),
    ("corpus-merge-input-empty", cmd("corpus-merge", at("merged-corpus"), "")),
    ("corpus-merge-input-a-file", cmd("corpus-merge", at("merged-corpus"), at("report.json"))),
    ("corpus-merge-input-not-a-corpus", cmd("corpus-merge", at("merged-corpus"), at("."))),
    ("corpus-merge-input-twice", cmd("corpus-merge", at("merged-corpus"), at("corpus"), at("corpus/."))),
    ("corpus-merge-input-database-a-file", cmd("corpus-merge", at("merged-corpus"), at("corpus"),
                                               shard_with("hypothesis", "x"))),
    ("corpus-merge-input-database-not-key-folders", cmd("corpus-merge", at("merged-corpus"),
                                                        shard_with("hypothesis/notes.txt", "x"))),
    ("corpus-merge-input-database-damaged", cmd("corpus-merge", at("merged-corpus"), shard_with(
        "hypothesis/0123456789abcdef/0123456789abcdef", b"\x00\x01"))),
    ("corpus-merge-out-is-an-input", cmd("corpus-merge", at("corpus"), at("corpus"))),
    ("corpus-merge-out-inside-an-input", cmd("corpus-merge", at("corpus/merged"), at("corpus"))),
    ("corpus-merge-out-holds-an-input", cmd("corpus-merge", at("corpus"), lambda w: str(
        Path(write("corpus/shard/failures/a.json", _repro())(w)).parents[1]))),
    ("corpus-merge-out-empty", cmd("corpus-merge", "", at("corpus"))),
    ("corpus-merge-out-a-file", cmd("corpus-merge", at("notes.txt"), at("corpus"))),
    ("corpus-merge-out-not-a-corpus", cmd("corpus-merge", lambda w: str(Path(write("mine/notes.txt", "x")(w)).parent),
                                          at("corpus"))),
    ("corpus-merge-out-in-proc", cmd("corpus-merge", "/proc/merged-corpus", at("corpus"))),
    # issue 45: trend over shards -- a night is a whole run (merge its shards first)
    ("trend-a-shard-as-a-night", cmd("trend", at("report.json"), part_of_the_report("shard-2.json", (2, 2)))),
    ("trend-two-shards-as-two-nights", cmd("trend", part_of_the_report("shard-1.json", (1, 2)),
                                           part_of_the_report("shard-2.json", (2, 2)))),
    ("trend-two-merges-of-one-run", cmd("trend", part_of_the_report("merge-1.json", (1, 2), merged=True),
                                        part_of_the_report("merge-2.json", (2, 2), merged=True))),
    # ----------------------------------------------------------------- selftest
    ("selftest-unknown-target", cmd("selftest", "--target", "nope")),
    ("selftest-max-examples-zero", cmd("selftest", "--target", TARGET, "--max-examples", "0")),
    ("selftest-limit-zero", cmd("selftest", "--target", TARGET, "--limit", "0")),
    ("selftest-kill-rate-above-one", cmd("selftest", "--target", TARGET, "--min-kill-rate", "2")),
    ("selftest-kill-rate-nan", cmd("selftest", "--target", TARGET, "--min-kill-rate", "nan")),
    ("selftest-unknown-device", cmd("selftest", "--target", TARGET, "--device", "tpu")),
    ("selftest-unknown-contract", cmd("selftest", "--target", TARGET, "--contract", "x")),
    ("selftest-seed-negative", cmd("selftest", "--target", TARGET, "--seed", "-1")),
    ("selftest-json-in-proc", cmd("selftest", "--target", TARGET, "--json", "/proc/x.json")),
    ("selftest-json-a-folder", cmd("selftest", "--target", TARGET, "--json", at("corpus"))),
    ("selftest-json-empty", cmd("selftest", "--target", TARGET, "--json", "")),
    ("selftest-json-over-known-issues", cmd("selftest", "--target", TARGET, "--json", at("known.json"))),
    ("selftest-json-over-a-repro", cmd("selftest", "--target", TARGET, "--json", at(REPRO))),
    ("selftest-json-over-a-report", cmd("selftest", "--target", TARGET, "--json", at("report.json"))),
    ("selftest-json-over-a-text-file", cmd("selftest", "--target", TARGET, "--json", at("notes.txt"))),
    ("selftest-json-over-the-equivalents", cmd("selftest", "--target", TARGET, "--json",
                                               lambda w: str(Path(fuzz.cli.__file__).parents[1] / "docs" /
                                                             "selftest-equivalent.json"))),
    # ----------------------------------------------------------------- provenance
    ("provenance-unknown-target", cmd("provenance", "--target", "nope")),
    ("provenance-source-without-equals", cmd("provenance", "--source", "0.30.0")),
    ("provenance-source-without-version", cmd("provenance", "--source", "=/tmp")),
    ("provenance-source-missing-path", cmd("provenance", "--source", "9.9.9=/missing-vllm-checkout")),
    ("provenance-source-a-text-file", cmd("provenance", "--source", lambda w: f"0.30.0={w / 'notes.txt'}")),
    ("provenance-legacy-source-missing", cmd("provenance", "--legacy-source", "/missing-vllm-checkout")),
    ("provenance-legacy-source-empty", cmd("provenance", "--legacy-source", "")),
    ("provenance-optimized-source-not-a-wheel", cmd("provenance", "--optimized-source", at("fake.whl"))),
    ("provenance-against-empty", cmd("provenance", "--against", "")),
    ("provenance-against-nonsense", cmd("provenance", "--against", "vllm>=1")),
    ("provenance-cache-a-file", cmd("provenance", "--cache", at("notes.txt"))),
    ("provenance-cache-empty", cmd("provenance", "--cache", "")),
    ("provenance-legacy-diffs-without-against", cmd("provenance", "--legacy-diffs")),
    ("provenance-sources-empty", cmd("provenance", "--sources", "")),
    ("provenance-sources-missing", cmd("provenance", "--sources", "/missing-syncfuzz-sources")),
    # issue 45: no silent successes (a flag the command would not use)
    ("provenance-source-of-a-release-no-copy-came-from",
     cmd("provenance", "--source", lambda w: f"9.9.9={vllm_tree('vllm-tree')(w)}")),
    # ----------------------------------------------------------------- sources
    ("sources-no-action", cmd("sources")),
    ("sources-unknown-action", cmd("sources", "remove")),
    ("sources-fetch-no-spec", cmd("sources", "fetch", "--into", at("packs"))),
    ("sources-fetch-no-into", cmd("sources", "fetch", "vllm==0.30.0")),
    ("sources-fetch-into-a-file", cmd("sources", "fetch", "vllm==0.30.0", "--into", at("notes.txt"))),
    ("sources-fetch-into-empty", cmd("sources", "fetch", "vllm==0.30.0", "--into", "")),
    ("sources-fetch-into-under-a-file", cmd("sources", "fetch", "vllm==0.30.0", "--into",
                                            lambda w: str(w / "notes.txt" / "packs"))),
    ("sources-fetch-into-proc", cmd("sources", "fetch", "vllm==0.30.0", "--into", "/proc/syncfuzz-packs")),
    ("sources-fetch-missing-path", cmd("sources", "fetch", "/missing-vllm-checkout", "--into", at("packs"))),
    ("sources-fetch-a-text-file", cmd("sources", "fetch", at("notes.txt"), "--into", at("packs"))),
    ("sources-fetch-cache-a-file", cmd("sources", "fetch", "vllm==0.30.0", "--into", at("packs"),
                                       "--cache", at("notes.txt"))),
    ("sources-fetch-cache-empty", cmd("sources", "fetch", "vllm==0.30.0", "--into", at("packs"), "--cache", "")),
    ("sources-list-missing-folder", cmd("sources", "list", "--sources", "/missing-syncfuzz-sources")),
    ("sources-list-empty-folder", cmd("sources", "list", "--sources", "")),
    ("sources-list-a-file", cmd("sources", "list", "--sources", at("notes.txt"))),
    env("sources-list-env-missing", cmd("sources", "list"), SYNCFUZZ_SOURCES="/missing-syncfuzz-sources"),
    # ----------------------------------------------------------------- coverage (docs/reach.md)
    ("coverage-no-report", cmd("coverage")),
    ("coverage-missing-report", cmd("coverage", at("missing.json"))),
    ("coverage-not-a-report", cmd("coverage", write("other.json", {"format": "x"}))),
    ("coverage-report-without-reach", cmd("coverage", at("report.json"))),
    ("coverage-unknown-target", cmd("coverage", at("report.json"), "--target", "no-such-target")),
    ("coverage-bad-device", cmd("coverage", at("report.json"), "--device", "tpu")),
    ("run-require-changes-without-sources", run("--require-changes-covered")),
    ("run-require-changes-no-coverage", run("--require-changes-covered", "--no-coverage", "--legacy", "vllm==0.27.1")),
    ("run-sync-budget-unknown", run("--sync-budget", "sometimes")),
    ("run-gpu-share-unknown", run("--gpu-share", "always")),
    # ----------------------------------------------------------------- new-target
    ("new-target-no-arguments", cmd("new-target")),
    ("new-target-no-upstream", cmd("new-target", "my-target", "--legacy-version", "0.29.0",
                                   "--optimized-version", "0.30.0")),
    ("new-target-no-versions", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f")),
    ("new-target-root-missing", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                    "0.29.0", "--optimized-version", "0.30.0", "--root", "/missing-checkout")),
    ("new-target-root-empty", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                  "0.29.0", "--optimized-version", "0.30.0", "--root", "")),
    ("new-target-root-a-file", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                   "0.29.0", "--optimized-version", "0.30.0", "--root", at("notes.txt"))),
    ("new-target-root-not-a-checkout", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f",
                                           "--legacy-version", "0.29.0", "--optimized-version", "0.30.0",
                                           "--root", at("nocache"))),
    ("new-target-bad-name", cmd("new-target", "My Target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                "0.29.0", "--optimized-version", "0.30.0")),
    ("new-target-taken-name", cmd("new-target", TARGET, "--upstream", "vllm/x.py::f", "--legacy-version",
                                  "0.29.0", "--optimized-version", "0.30.0")),
    ("new-target-bad-upstream-ref", cmd("new-target", "my-target", "--upstream", "not-a-ref", "--legacy-version",
                                        "0.29.0", "--optimized-version", "0.30.0")),
    ("new-target-bad-module", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                  "0.29.0", "--optimized-version", "0.30.0", "--module", "not-a-module")),
    ("new-target-empty-module", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                    "0.29.0", "--optimized-version", "0.30.0", "--module", "")),
    ("new-target-empty-version", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                     " ", "--optimized-version", "0.30.0")),
    ("new-target-legacy-source-missing", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f",
                                             "--legacy-version", "0.29.0", "--optimized-version", "0.30.0",
                                             "--legacy-source", "/missing-vllm-checkout")),
    ("new-target-legacy-source-empty", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f",
                                           "--legacy-version", "0.29.0", "--optimized-version", "0.30.0",
                                           "--legacy-source", "")),
    ("new-target-cache-a-file", cmd("new-target", "my-target", "--upstream", "vllm/x.py::f", "--legacy-version",
                                    "0.29.0", "--optimized-version", "0.30.0", "--cache", at("notes.txt"))),
    # issue 45: no silent successes (names checked where the target is written; a pair that is one release).
    # A definition the shipped packs hold: without the refusal, each case would reach the writing.
    ("new-target-name-taken-in-the-root", cmd("new-target", "their-target", "--upstream", SHIPPED_REF,
                                              "--legacy-version", "0.29.0", "--optimized-version", "0.30.0",
                                              "--root", checkout_naming("their-target"))),
    ("new-target-same-versions", cmd("new-target", "my-target", "--upstream", SHIPPED_REF, "--legacy-version",
                                     "0.30.0", "--optimized-version", "0.30.0", "--module", "not_here_yet")),
    ("new-target-same-versions-under-root", cmd("new-target", "my-target", "--upstream", SHIPPED_REF,
                                                "--legacy-version", "0.30.0", "--optimized-version", " 0.30.0",
                                                "--root", checkout_naming("their-target"))),
    # issue 45, a second bad-input pass (lab/scripts/bad_input_pass.py): refused before any download or write
    ("new-target-version-not-a-release", cmd("new-target", "my-target", "--upstream", SHIPPED_REF, "--legacy-version",
                                             "old", "--optimized-version", "0.30.0", "--module", "not_here_yet")),
    ("new-target-version-with-vllm-prefix", cmd("new-target", "my-target", "--upstream", SHIPPED_REF,
                                                "--legacy-version", "0.29.0", "--optimized-version",
                                                "vllm==0.30.0", "--module", "not_here_yet")),
    ("new-target-also-names-the-upstream", cmd("new-target", "my-target", "--upstream", SHIPPED_REF, "--also",
                                               SHIPPED_REF, "--legacy-version", "0.29.0", "--optimized-version",
                                               "0.30.0", "--module", "not_here_yet")),
])


def test_the_table_is_large():
    assert len(CASES) >= 100


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_touches_nothing(name, world, capsys, monkeypatch, no_work):
    monkeypatch.setenv("SYNCFUZZ_WHEEL_CACHE", str(world / "nocache"))  # offline: no wheel is ever found
    for variable, value in ENV.get(name, {}).items():
        monkeypatch.setenv(variable, value(world) if callable(value) else value)
    argv = CASES[name](world)
    before = _snapshot(world)
    equivalents = Path(fuzz.cli.__file__).parents[1] / "docs" / "selftest-equivalent.json"
    equivalents_before = equivalents.read_bytes()
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (argv, captured.out, captured.err)
    assert len(err.splitlines()) == 1 and err.startswith("fuzz: error: ") and err != "fuzz: error:", err
    assert "Traceback" not in captured.out + captured.err
    assert _snapshot(world) == before  # byte-identical, nothing added or removed
    assert equivalents.read_bytes() == equivalents_before


# --------------------------------------------------------------------------- what is still allowed


def test_earlier_outputs_of_the_same_kind_are_replaced(world, capsys):
    """The overwrite rule keeps a run's own earlier report, Markdown and JUnit replaceable."""
    (world / "old.md").write_text("# syncfuzz report\nlast night\n")
    (world / "old.xml").write_text("<?xml version='1.0'?><testsuites/>\n")
    before = (world / "report.json").read_bytes()
    code = main(run("--report", at("report.json"), "--markdown", at("old.md"), "--junit", at("old.xml"),
                    "--known-issues", at("known.json"), "--seed", "1")(world))
    assert code == 0, capsys.readouterr().err
    assert json.loads((world / "report.json").read_text())["format"] == "syncfuzz-report/2"
    assert (world / "report.json").read_bytes() != before and "last night" not in (world / "old.md").read_text()
    assert (world / "corpus" / "failures" / REPRO_NAME).read_text() == json.dumps(_repro())


def test_a_merge_replaces_an_earlier_merge(world, capsys):
    (world / "merged.json").write_bytes((world / "report.json").read_bytes())
    assert main(["merge-reports", str(world / "merged.json"), str(world / "report.json")]) == 0, \
        capsys.readouterr().err


def test_a_report_in_the_corpus_reports_folder_is_fine(world):
    from fuzz.reports.preflight import check_no_collisions

    check_no_collisions({"--report": world / "corpus" / "reports" / "r.json"}, {}, world / "corpus")


def test_collisions_see_through_links_and_dots(world):
    from fuzz.errors import UsageError
    from fuzz.reports.preflight import check_no_collisions

    (world / "linked").symlink_to(world / "corpus")
    with pytest.raises(UsageError, match="failures/ folder"):
        check_no_collisions({"--report": world / "linked" / "failures" / "r.json"}, {}, world / "corpus")
    with pytest.raises(UsageError, match="is also the input IN"):
        check_no_collisions({"OUT": world / "corpus" / ".." / "report.json"}, {"IN": [world / "report-hardlink.json"]})
