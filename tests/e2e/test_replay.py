"""Saved failures: found, shrunk, saved as JSON, replayed in a fresh process."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from fuzz.cli import main
from fuzz.engine.repro import REPRO_FORMAT, load_repro
from tests.support import cli

PLANTED = {"SYNCFUZZ_TARGET_MODULES": "tests.planted"}


@pytest.fixture(scope="module")
def saved_failure(tmp_path_factory):
    """Run the CLI on a planted bug once; return (run result, repro path)."""
    corpus = tmp_path_factory.mktemp("corpus")
    result = cli("run", "--target", "planted-offsets-off-by-one", "--device", "cpu", "--seed", "0",
                 "--max-examples", "50", "--confirm", "1", "--corpus", str(corpus), extra_env=PLANTED)
    repros = sorted((corpus / "failures").glob("*.json"))
    return result, repros


def test_planted_bug_run_exits_1_and_saves_one_repro(saved_failure):
    result, repros = saved_failure
    assert result.returncode == 1, result.stderr
    assert len(repros) == 1
    assert "DIVERGENCE in planted-offsets-off-by-one" in result.stdout
    assert f"python -m fuzz replay {repros[0]}" in result.stdout


def test_repro_file_is_self_contained_json(saved_failure):
    _, (repro,) = saved_failure
    payload = json.loads(repro.read_text())
    assert payload["format"] == REPRO_FORMAT
    assert payload["target"] == "planted-offsets-off-by-one"
    assert payload["target_module"] == "tests.planted"
    assert payload["seed"] == 0 and payload["device"] == "cpu" and payload["contract"] == "caller"
    assert payload["verdict"] == "divergence"
    assert payload["versions"]["legacy"] == "vllm 0.27.1" and payload["versions"]["optimized"] == "vllm 0.28.0"
    assert payload["versions"]["torch"] == torch.__version__
    # Shrunk: one empty-or-single sequence, the smallest chunk size.
    assert len(payload["input"]["cu_seqlens"]) == 1 and payload["input"]["chunk_size"] == 1
    legacy, optimized = payload["outputs"]["legacy"]["value"], payload["outputs"]["optimized"]["value"]
    assert legacy["tensor"]["first_values"] == [0] and optimized["tensor"]["first_values"] == [1]
    assert payload["mismatches"][0]["what"] == "values"


def test_replay_reproduces_in_a_fresh_process(saved_failure):
    _, (repro,) = saved_failure
    result = cli("replay", str(repro), extra_env=PLANTED)
    assert result.returncode == 1, result.stderr
    assert "replaying with syncfuzz" in result.stdout and "warning" not in result.stdout
    assert "DIVERGENCE reproduced on cpu" in result.stdout
    assert "Mismatched elements" in result.stdout


def test_replay_of_a_fixed_bug_exits_0(saved_failure, tmp_path):
    _, (repro,) = saved_failure
    payload = json.loads(repro.read_text())
    payload["target"] = "fla-chunk-offsets"  # the real optimized copy has no such bug
    payload["target_module"] = None
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(payload))
    result = cli("replay", str(fixed))
    assert result.returncode == 0, result.stderr
    assert "no longer fails" in result.stdout


def test_same_seed_same_examples(tmp_path):
    from fuzz.targets import lookup
    from tests.support import fuzz

    (target,) = lookup(["glm4v-embeddings"])
    seen: list[list[dict]] = []
    import fuzz.engine.runner as runner

    original = runner.run_example
    for attempt in range(2):
        specs: list[dict] = []

        def recording(target, spec, _specs=specs, **kwargs):
            _specs.append(spec)
            return original(target, spec, **kwargs)

        runner.run_example = recording
        try:
            fuzz(target, max_examples=30, seed=1234)
        finally:
            runner.run_example = original
        seen.append(specs)
    assert seen[0] == seen[1] and len(seen[0]) == 30


def _write(tmp_path, name, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


def _valid_payload(**changes):
    payload = {"format": REPRO_FORMAT, "target": "fla-chunk-offsets", "input": {"device": "cpu", "cu_seqlens": [0, 3],
               "dtype": "int32", "chunk_size": 2}, "device": "cpu", "contract": "caller", "verdict": "divergence",
               "seed": 0}
    payload.update(changes)
    return json.dumps(payload).encode()


BAD_FILES = {
    "missing": (None, "does not exist"),
    "empty": (b"", "not valid JSON"),
    "truncated": (_valid_payload()[:40], "not valid JSON"),
    "binary": (b"\xff\xfe\x00garbage", "not valid JSON"),
    "pickle": (pickle.dumps({"target": "fla-chunk-offsets"}), "looks like a pickle"),
    "json-list": (b"[1, 2]", "expected an object"),
    "wrong-format": (_valid_payload(format="other/9"), "has format"),
    "no-target": (_valid_payload(target=None), "field 'target'"),
    "input-not-object": (_valid_payload(input=[1]), "field 'input'"),
    "input-without-device": (_valid_payload(input={"cu_seqlens": [0]}), "'device'"),
    "bad-contract": (_valid_payload(contract="loose"), "contract"),
    "unknown-target": (_valid_payload(target="fla-chunk-offset"), "closest matches: fla-chunk-offsets"),
    "untrusted-target-module": (_valid_payload(target_module="this"), "does not trust"),
    "bad-verdict": (_valid_payload(verdict="banana"), "verdict 'banana' is not one of"),
    "config-unknown-key": (_valid_payload(config={"seed": 0, "frobnicate": 1}), "unknown settings ['frobnicate']"),
    "config-wrong-type": (_valid_payload(config={"stress": "yes"}), "stress"),
    "input-wrong-type": (_valid_payload(input={"device": "cpu", "cu_seqlens": "abc", "dtype": "int32",
                                                "chunk_size": 2}), "is invalid: its input cannot be built"),
    "input-unknown-dtype": (_valid_payload(input={"device": "cpu", "cu_seqlens": [0, 3], "dtype": "int33",
                                                  "chunk_size": 2}), "is invalid"),
    "input-missing-key": (_valid_payload(input={"device": "cpu", "cu_seqlens": [0, 3]}), "is invalid"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_unusable_repro_file_is_one_line_and_exit_2(name, tmp_path, capsys):
    content, expected = BAD_FILES[name]
    path = str(tmp_path / "absent.json") if content is None else _write(tmp_path, f"{name}.json", content)
    before = None if content is None else (tmp_path / f"{name}.json").read_bytes()
    assert main(["replay", path]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fuzz: error: ") and expected in err, err
    assert "Beautiful is better than ugly" not in captured.out  # `import this` never ran
    if before is not None:
        assert (tmp_path / f"{name}.json").read_bytes() == before  # never touched


def test_cuda_repro_on_a_cpu_host_says_it_needs_a_gpu(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    path = _write(tmp_path, "cuda.json", _valid_payload(device="cuda", input={
        "device": "cuda", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2}))
    assert main(["replay", path]) == 2
    assert "needs a GPU" in capsys.readouterr().err


def test_cuda_repro_replays_on_cpu_when_asked(tmp_path, capsys):
    path = _write(tmp_path, "cuda.json", _valid_payload(device="cuda", input={
        "device": "cuda", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2}))
    assert main(["replay", path, "--device", "cpu"]) == 0
    assert "agree on cpu" in capsys.readouterr().out


def test_load_repro_accepts_a_saved_file(saved_failure):
    _, (repro,) = saved_failure
    assert load_repro(repro)["target"] == "planted-offsets-off-by-one"


def test_cuda_only_verdict_replayed_on_cpu_says_it_needs_a_gpu(tmp_path, capsys):
    path = _write(tmp_path, "sync.json", _valid_payload(device="cuda", verdict="sync-regression", input={
        "device": "cuda", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2}))
    assert main(["replay", path, "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "needs a GPU to reproduce" in out and "agree on cpu" in out


# --------------------------------------------------------------------------- replay DIR

CUDA_INPUT = {"device": "cuda", "cu_seqlens": [0, 3], "dtype": "int32", "chunk_size": 2}


def _table(out: str) -> dict[str, str]:
    """replay DIR's table: file name -> its row (the rows between the header and the summary line)."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["file", "target"])
    return {line.split()[0]: line for line in lines[header + 1:-1] if line.strip()}


def test_replay_of_a_folder_replays_every_file_and_prints_a_table(saved_failure, tmp_path, capsys, monkeypatch):
    _, (repro,) = saved_failure
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.planted")
    folder = tmp_path / "failures"
    folder.mkdir()
    (folder / repro.name).write_bytes(repro.read_bytes())
    _write(folder, "fixed.json", _valid_payload())  # the copies agree on it: no longer fails
    _write(folder, ".tmp-half-saved", b"{")  # a save in progress is not a repro file
    assert main(["replay", str(folder)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("replaying 2 repro file(s) of")
    assert out.splitlines()[1].split() == ["file", "target", "device", "saved", "verdict", "result"]
    rows = _table(out)
    assert set(rows) == {repro.name, "fixed.json"}
    assert "planted-offsets-off-by-one" in rows[repro.name] and "still fails (divergence)" in rows[repro.name]
    assert rows["fixed.json"].split()[1:4] == ["fla-chunk-offsets", "cpu", "divergence"]
    assert rows["fixed.json"].endswith("no longer fails")
    assert out.splitlines()[-1] == ("replayed 2 of 2 repro file(s): 1 still fail, 1 no longer fail, 0 accepted, "
                                    "0 invalid")


def test_replay_of_a_folder_exit_codes_invalid_input_and_gpu_only(tmp_path, capsys):
    folder = tmp_path / "failures"
    folder.mkdir()
    _write(folder, "fixed.json", _valid_payload())
    _write(folder, "bad-input.json", _valid_payload(input={"device": "cpu", "cu_seqlens": "abc", "dtype": "int32",
                                                           "chunk_size": 2}))
    assert main(["replay", str(folder)]) == 3  # an input the target cannot build: invalid, the others still run
    out = capsys.readouterr().out
    rows = _table(out)
    assert "invalid: " in rows["bad-input.json"] and "cannot be built" in rows["bad-input.json"]
    assert rows["fixed.json"].endswith("no longer fails")
    assert out.splitlines()[-1].startswith("replayed 1 of 2 repro file(s): 0 still fail, 1 no longer fail, "
                                           "0 accepted, 1 invalid")
    if torch.cuda.is_available():
        return
    (folder / "bad-input.json").unlink()
    _write(folder, "gpu.json", _valid_payload(device="cuda", input=CUDA_INPUT))
    assert main(["replay", str(folder)]) == 3  # nothing fails, but one was not shown either way
    out = capsys.readouterr().out
    rows = _table(out)
    assert "needs a GPU: skipped" in rows["gpu.json"] and rows["fixed.json"].endswith("no longer fails")
    assert out.splitlines()[-1].endswith(", 1 skipped (needs a GPU)")


FOLDER_BAD_FILES = ["unknown-target", "truncated", "untrusted-target-module"]


def _folder_with_one_bad_file(tmp_path, name: str):
    """A failures/ folder: a fine repro (a-fine-one.json) and the bad file ``name`` (z-NAME.json)."""
    folder = tmp_path / "failures"
    folder.mkdir()
    _write(folder, "a-fine-one.json", _valid_payload())
    _write(folder, f"z-{name}.json", BAD_FILES[name][0])
    return folder


@pytest.mark.parametrize("name", FOLDER_BAD_FILES)
def test_a_bad_file_in_a_folder_is_an_invalid_row_and_the_rest_replays(name, tmp_path, capsys):
    folder = _folder_with_one_bad_file(tmp_path, name)
    assert main(["replay", str(folder)]) == 3  # incomplete: one file could not be checked
    captured = capsys.readouterr()
    rows = _table(captured.out)
    assert rows["a-fine-one.json"].endswith("no longer fails")
    assert "invalid: " in rows[f"z-{name}.json"] and BAD_FILES[name][1] in rows[f"z-{name}.json"]
    assert captured.out.splitlines()[-1] == ("replayed 1 of 2 repro file(s): 0 still fail, 1 no longer fail, "
                                             "0 accepted, 1 invalid")
    assert "Beautiful is better than ugly" not in captured.out  # `import this` never ran
    assert captured.err == ""


@pytest.mark.parametrize("name", FOLDER_BAD_FILES)
def test_strict_a_bad_file_in_a_folder_is_one_line_naming_it_before_any_replay(name, tmp_path, capsys):
    folder = _folder_with_one_bad_file(tmp_path, name)
    assert main(["replay", str(folder), "--strict"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and f"z-{name}.json" in err and BAD_FILES[name][1] in err, err
    assert "nothing in" in err and captured.out == ""  # validated first: nothing was replayed


def test_a_folder_none_of_whose_files_can_be_replayed_is_one_line_and_exit_2(tmp_path, capsys):
    folder = tmp_path / "failures"
    folder.mkdir()
    for name in FOLDER_BAD_FILES:
        _write(folder, f"{name}.json", BAD_FILES[name][0])
    assert main(["replay", str(folder)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "none of its 3 repro file(s) can be replayed" in err, err
    assert captured.out == ""


def test_an_empty_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no repro file" in err


# --------------------------------------------------------------------------- --known-issues


def _known(tmp_path, **match) -> str:
    issue = {"target": "planted-offsets-off-by-one", "verdict": "divergence", "reason": "planted on purpose", **match}
    path = tmp_path / "known.json"
    path.write_text(json.dumps({"format": "syncfuzz-known-issues/1", "issues": [issue]}))
    return str(path)


def test_known_issues_accept_a_failure_that_still_fails_in_a_folder(saved_failure, tmp_path, capsys, monkeypatch):
    _, (repro,) = saved_failure
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.planted")
    folder = tmp_path / "failures"
    folder.mkdir()
    (folder / repro.name).write_bytes(repro.read_bytes())
    _write(folder, "fixed.json", _valid_payload())
    # An entry that matches another mismatch kind accepts nothing: the planted failure still fails.
    assert main(["replay", str(folder), "--known-issues", _known(tmp_path, mismatch="dtype")]) == 1
    assert "1 still fail, 1 no longer fail, 0 accepted" in capsys.readouterr().out
    # The known-issues file beside the repro files is not read as one of them.
    known = _known(folder, mismatch="values")
    assert main(["replay", str(folder), "--known-issues", known]) == 0
    out = capsys.readouterr().out
    rows = _table(out)
    assert set(rows) == {repro.name, "fixed.json"}
    assert rows[repro.name].endswith("still fails (divergence), accepted: planted on purpose")
    assert out.splitlines()[-1] == ("replayed 2 of 2 repro file(s): 0 still fail, 1 no longer fail, 1 accepted, "
                                    "0 invalid")


def test_known_issues_accept_a_failure_that_still_fails_in_a_file(saved_failure, tmp_path, capsys, monkeypatch):
    _, (repro,) = saved_failure
    monkeypatch.setenv("SYNCFUZZ_TARGET_MODULES", "tests.planted")
    assert main(["replay", str(repro), "--known-issues", _known(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "DIVERGENCE reproduced on cpu" in out
    assert out.splitlines()[-1] == "still fails, accepted by --known-issues: planted on purpose"
