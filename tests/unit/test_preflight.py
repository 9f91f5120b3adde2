"""Bad input to any command is one line and exit 2, before any work is done,
and nothing already saved is touched. One table, one id per mistake."""

from __future__ import annotations

import json

import pytest

from fuzz.cli import main

ONE = ["--target", "fla-chunk-offsets", "--device", "cpu", "--max-examples", "1", "--in-process", "--quiet"]


def _known(tmp_path, **issue) -> str:
    path = tmp_path / "known.json"
    path.write_text(json.dumps({"format": "syncfuzz-known-issues/1",
                                "issues": [{"target": "fla-chunk-offsets", "verdict": "divergence", "reason": "r",
                                            **issue}]}))
    return str(path)


def _file(tmp_path) -> str:
    (tmp_path / "plain").write_text("a regular file")
    return str(tmp_path / "plain")


BAD_RUNS = {
    "report-in-proc": (lambda t: ["--report", "/proc/x.json"], "cannot be written"),
    "report-in-sysfs": (lambda t: ["--report", "/sys/syncfuzz-report.json"], "cannot be written"),
    "report-under-a-file": (lambda t: ["--report", _file(t) + "/r.json"], "is a file, not a folder"),
    "report-empty": (lambda t: ["--report", ""], "--report is empty"),
    "report-is-a-folder": (lambda t: ["--report", str(t)], "is a directory"),
    "markdown-in-proc": (lambda t: ["--markdown", "/proc/x.md"], "cannot be written"),
    "junit-under-a-file": (lambda t: ["--junit", _file(t) + "/sub/r.xml"], "is a file, not a folder"),
    "corpus-under-a-file": (lambda t: ["--corpus", _file(t) + "/corpus"], "is a file, not a folder"),
    "corpus-in-proc": (lambda t: ["--corpus", "/proc/syncfuzz-corpus"], "cannot be written"),
    "known-issues-is-a-folder": (lambda t: ["--known-issues", str(t)], "is a directory"),
    "known-issues-misspelt-target": (lambda t: ["--known-issues", _known(t, target="fla-chunk-offset")],
                                     "closest matches: fla-chunk-offsets"),
    "known-issues-misspelt-verdict": (lambda t: ["--known-issues", _known(t, verdict="divergance")],
                                      "did you mean 'divergence'"),
    "known-issues-bad-contract": (lambda t: ["--known-issues", _known(t, contract="callers")], "contract 'callers'"),
    "shard-leaves-nothing": (lambda t: ["--shard", "2/2"], "leaves no item"),
    "example-timeout-too-short": (lambda t: ["--example-timeout", "0.001"], "shorter than one example"),
}


@pytest.mark.parametrize("name", sorted(BAD_RUNS))
def test_bad_run_input_is_one_line_and_exit_2_before_any_work(name, tmp_path, capsys):
    make, expected = BAD_RUNS[name]
    args = make(tmp_path)
    corpus = [] if "--corpus" in args else ["--corpus", str(tmp_path / "corpus")]
    assert main(["run", *ONE, *corpus, *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fuzz: error: ") and expected in err, err
    assert "examples" not in captured.out  # no summary table: nothing ran
    if not corpus:
        return
    if name not in ("report-is-a-folder",):
        assert not (tmp_path / "corpus" / "hypothesis").exists()  # no example ran


@pytest.mark.parametrize("rate", ["2", "-1", "nan", "x"])
def test_an_impossible_kill_rate_is_refused(rate, capsys):
    assert main(["selftest", "--target", "fla-chunk-offsets", "--min-kill-rate", rate]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--min-kill-rate" in err


def test_selftest_json_into_an_unwritable_place_is_refused_first(capsys):
    assert main(["selftest", "--target", "fla-chunk-offsets", "--json", "/proc/x.json"]) == 2
    assert "cannot be written" in capsys.readouterr().err


def test_a_report_that_cannot_be_written_at_the_end_goes_to_a_fallback(tmp_path, capsys, monkeypatch):
    """The folder was fine at the start and is a file by the end: the report
    is saved elsewhere, the line names where, and a clean run exits 2, not 0."""
    import fuzz.run.session as session

    out = tmp_path / "out"
    out.mkdir()
    real_finish = session._finish

    def finish_after_the_folder_went(*args, **kwargs):
        out.rmdir()
        out.write_text("in the way")
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(session, "_finish", finish_after_the_folder_went)
    code = main(["run", *ONE, "--confirm", "0", "--corpus", str(tmp_path / "c"), "--report", str(out / "r.json")])
    err = capsys.readouterr().err
    assert code == 2, err
    line = next(line for line in err.splitlines() if "could not write report" in line)
    saved = line.split("saved to ")[1].split("'")[1]
    assert json.loads(open(saved).read())["targets"][0]["name"] == "fla-chunk-offsets"


def test_outputs_follow_the_umask(tmp_path):
    import os

    previous = os.umask(0o027)
    try:
        assert main(["run", *ONE, "--confirm", "0", "--corpus", str(tmp_path / "c"),
                     "--report", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")]) == 0
    finally:
        os.umask(previous)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "r.md").stat().st_mode & 0o777 == 0o640
