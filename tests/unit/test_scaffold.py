"""``python -m fuzz new-target``: verbatim slices that provenance accepts, stubs, and every refusal.

Upstream text is in memory or in temporary trees; files are written under tmp_path only.
"""

from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path

import pytest

from fuzz.cli import main
from fuzz.errors import UsageError
from fuzz.releases import common, matching, packs, scaffold
from fuzz.releases.sources import TextSource

ROOT = Path(__file__).resolve().parents[2]
PATH = "vllm/v1/toy_utils.py"
PAIR = ("0.29.0", "0.30.0")

OLD = '''\
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
import json
from typing import TYPE_CHECKING

import torch
import uvloop

from vllm.utils.torch_utils import PIN_MEMORY
from vllm.compilation.decorators import support_torch_compile

if TYPE_CHECKING:
    import numpy as np

SCALE = 3


def _scaled(x):
    return x * SCALE


class Buffer:
    """Holds two tensors."""

    kind = "buffer"

    def __init__(self, n: int, pin: bool = PIN_MEMORY) -> None:
        self.cpu = torch.zeros(n, pin_memory=pin)
        self.gpu = torch.zeros(n)
        self.np: np.ndarray

    def copy(self, n: int | None = None) -> torch.Tensor:
        if n is None:
            return self.gpu.copy_(self.cpu)
        return self.gpu[:n].copy_(self.cpu[:n])

    def unrelated(self) -> str:
        return json.dumps(uvloop.new_event_loop())


@support_torch_compile
def fused(a):
    return _scaled(a) + 1
'''
NEW = OLD.replace('''        if n is None:
            return self.gpu.copy_(self.cpu)
        return self.gpu[:n].copy_(self.cpu[:n])''', '''        cpu, gpu = self.cpu, self.gpu
        if n is not None:
            cpu, gpu = cpu[:n], gpu[:n]
        return gpu.copy_(cpu.pin_memory() if PIN_MEMORY else cpu)''')
SOURCES = {"0.29.0": TextSource({PATH: OLD}, "0.29.0"), "0.30.0": TextSource({PATH: NEW}, "0.30.0")}
REFS = [f"{PATH}::Buffer.copy", f"{PATH}::fused"]


def checkout(tmp_path: Path) -> Path:
    """An empty syncfuzz-shaped tree to scaffold into."""
    for folder in ("legacy", "optimized", "strategies", "tests/unit"):
        (tmp_path / folder).mkdir(parents=True)
    return tmp_path


def plan(tmp_path: Path, **changes) -> scaffold.Plan:
    options = dict(name="toy-buffer-copy", refs=REFS, pair=PAIR, sources=SOURCES, module="toy",
                   also=[f"{PATH}::Buffer.__init__"], root=checkout(tmp_path))
    options.update(changes)
    return scaffold.plan(**options)


def test_the_copies_are_verbatim_slices_that_provenance_accepts(tmp_path):
    result = plan(tmp_path)
    assert sorted(result.files) == ["legacy/toy.py", "optimized/toy.py", "strategies/toy/__init__.py",
                                    "strategies/toy/inputs.py", "strategies/toy/oracles.py",
                                    "strategies/toy/planted.py", "strategies/toy/record.py",
                                    "tests/unit/test_oracles_toy.py"]
    for side, version, upstream in (("legacy", "0.29.0", OLD), ("optimized", "0.30.0", NEW)):
        text = result.files[f"{side}/toy.py"]
        assert text.startswith("# SPDX-License-Identifier: Apache-2.0\n")
        assert f"Copied from vllm {version}:\n{PATH} :: Buffer.copy, fused, Buffer.__init__" in text
        report = matching.check_copy(f"{side}/toy.py", text, SOURCES[version], [PATH], side)
        assert report.ok, [(u.qualname, u.problem, u.diff) for u in report.failed]
        assert {u.qualname for u in report.definitions} == {"Buffer", "Buffer.__init__", "Buffer.copy", "fused",
                                                            "_scaled"}
        # Each selected definition is upstream's text, line for line.
        copy_body = text[text.index("    def copy("):text.index("\n\n", text.index("    def copy("))]
        assert copy_body in upstream
        assert "def unrelated" not in text and "uvloop" not in text  # only what the slices use
        assert "import numpy as np\n" in text and "import torch\n" in text and "SCALE = 3\n" in text
        assert f"# from vllm.utils.torch_utils import PIN_MEMORY  {scaffold.MAP_MARK}\n" in text
        assert "PIN_MEMORY = None  # ADAPTED: TODO" in text
        assert "# @support_torch_compile  # ADAPTED: vllm decorator, not run here" in text
        namespace: dict = {}
        exec(compile(text, f"{side}/toy.py", "exec"), namespace)  # the scaffold imports: no vllm needed
        buffer = namespace["Buffer"](4, pin=False)
        buffer.cpu += 2
        assert buffer.copy(2).tolist() == [2.0, 2.0] and buffer.gpu.tolist() == [2.0, 2.0, 0.0, 0.0]
        assert namespace["fused"](1) == 4
    assert any("PIN_MEMORY" in line and "placeholder" in line for line in result.todo)
    assert any("support_torch_compile" in line for line in result.todo)


def test_the_record_names_the_pair_and_the_stubs_say_what_to_write(tmp_path):
    result = plan(tmp_path)
    record: dict = {}
    exec(result.files["strategies/toy/record.py"], record)
    (target,) = record["TARGETS"]
    assert target.versions == PAIR and record["VERSIONS"] == PAIR
    assert target.upstream == tuple(REFS)  # --also is copied, not named
    assert (target.legacy, target.optimized) == ("legacy.toy:Buffer.copy", "optimized.toy:Buffer.copy")
    assert target.inputs == "strategies.toy.inputs:ToyInputs"
    assert target.upstream_impl == "vllm.v1.toy_utils:Buffer.copy"
    inputs: dict = {}
    exec(result.files["strategies/toy/inputs.py"], inputs)
    with pytest.raises(NotImplementedError, match="docs/adding-a-target.md"):
        inputs["ToyInputs"]().specs(["cpu"], "caller")
    # The oracle the record names is the stub's, which says what to write until it is written.
    (invariant,) = target.invariants
    assert invariant.startswith("strategies.toy.oracles:")
    oracles: dict = {}
    exec(result.files["strategies/toy/oracles.py"], oracles)
    with pytest.raises(NotImplementedError, match="docs/adding-a-target.md"):
        oracles[invariant.partition(":")[2]]({}, None)
    # ...and the test that breaks it by hand fails until both are written: a scaffold never passes unwritten.
    name = invariant.partition(":")[2]
    test_module: dict = {name: oracles[name]}
    exec(result.files["tests/unit/test_oracles_toy.py"].replace(f"from strategies.toy.oracles import {name}\n", ""),
         test_module)
    (test,) = [value for key, value in test_module.items() if key.startswith("test_")]
    with pytest.raises(NotImplementedError):
        test()
    planted: dict = {}
    exec(result.files["strategies/toy/planted.py"], planted)
    assert planted["BUGS"] == [] and planted["BENIGN"] == []
    for rel in result.files:  # linted like the rest of the repo
        if rel.startswith(("legacy/", "optimized/")):
            continue
        assert max(len(line) for line in result.files[rel].splitlines()) <= 120, rel
        ast.parse(result.files[rel])


def test_write_creates_the_files_and_never_overwrites(tmp_path):
    result = plan(tmp_path)
    written = scaffold.write(result, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(result.files)
    assert (tmp_path / "legacy/toy.py").read_text() == result.files["legacy/toy.py"]
    with pytest.raises(UsageError, match="never overwrites"):
        scaffold.plan("toy-buffer-copy", REFS, PAIR, SOURCES, module="toy", root=tmp_path)


@pytest.mark.parametrize("change, message", [
    (dict(refs=[f"{PATH}::Buffer.copy_to"]), r"Buffer\.copy_to is not in vllm 0\.29\.0; closest: Buffer\.copy"),
    (dict(refs=[f"{PATH}:Buffer.copy"]), "must look like vllm/path/to/file.py::Qual.name"),
    (dict(refs=["vllm/v1/other.py::Buffer.copy"]), r"vllm 0\.29\.0 \(<memory>\) has no vllm/v1/other\.py"),
    (dict(refs=[]), "at least one --upstream"),
    (dict(name="Toy_Copy"), "lower-case words"),
    (dict(module="my-module"), "must be a Python module name"),
    (dict(known_targets=["toy-buffer-copy"]), "already exists"),
])
def test_refusals_are_one_line(tmp_path, change, message):
    with pytest.raises(UsageError, match=message) as caught:
        plan(tmp_path, **change)
    assert "\n" not in str(caught.value)


def test_a_qualname_only_one_release_holds_is_refused(tmp_path):
    newer = {**SOURCES, "0.30.0": TextSource({PATH: NEW.replace("def fused(", "def fused2(")}, "0.30.0")}
    with pytest.raises(UsageError, match=r"fused is not in vllm 0\.30\.0"):
        plan(tmp_path, sources=newer)


def _tree(tmp_path: Path, name: str, text: str) -> Path:
    root = tmp_path / name
    (root / Path(PATH).parent).mkdir(parents=True)
    (root / PATH).write_text(text)
    return root


def toy_request(tmp_path: Path) -> tuple[Path, list[str]]:
    """A checkout to write into and the new-target command line of the toy target, from two toy releases."""
    repo = checkout(tmp_path / "repo")
    old, new = _tree(tmp_path, "old", OLD), _tree(tmp_path, "new", NEW)
    return repo, ["new-target", "toy-buffer-copy", "--upstream", f"{PATH}::Buffer.copy", "--also",
                  f"{PATH}::Buffer.__init__", "--legacy-version", "0.29.0", "--optimized-version", "0.30.0",
                  "--root", str(repo), "--legacy-source", str(old), "--optimized-source", str(new)]


def test_the_cli_writes_under_root_and_exits_2_on_each_refusal(tmp_path, capsys):
    repo, argv = toy_request(tmp_path)
    new = argv[argv.index("--optimized-source") + 1]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "wrote legacy/toy_utils.py" in out and "left to do:" in out and "provenance --target" in out
    assert "def copy(" in (repo / "optimized/toy_utils.py").read_text()
    kept = (repo / "legacy/toy_utils.py").read_text()
    for bad, message in [
        (argv, "already exists; pick another name"),  # the name is taken in the checkout written into
        ([argv[0], "toy-buffer-copy-two", *argv[2:]], "never overwrites"),
        ([*argv[:-4], "--legacy-source", str(tmp_path / "nowhere"), "--optimized-source", new, "--module", "x"],
         "does not exist"),
        ([*argv, "--module", "y", "--root", str(tmp_path / "no-repo")], "is not a directory"),
    ]:
        assert main(bad) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert (repo / "legacy/toy_utils.py").read_text() == kept
    assert not (repo / "legacy/x.py").exists()


def test_a_name_taken_in_the_checkout_written_into_is_refused(tmp_path, capsys):
    """--root OTHER: the names are those of the checkout the record goes into, not of the running one."""
    repo, argv = toy_request(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main([*argv, "--module", "again"]) == 2  # another module, the same target name: a duplicate there
    err = capsys.readouterr().err.strip()
    assert err == "fuzz: error: a target named 'toy-buffer-copy' already exists; pick another name"
    assert not (repo / "fuzz/catalog/again.py").exists()


def test_another_checkouts_names_are_read_from_its_catalog_as_list_shows_them(tmp_path):
    from fuzz.targets import catalog_targets
    TARGETS = catalog_targets()

    for record in (ROOT / "strategies").glob("*/record.py"):
        (tmp_path / record.parent.relative_to(ROOT)).mkdir(parents=True)
        shutil.copy(record, tmp_path / record.relative_to(ROOT))
    assert sorted(scaffold.target_names(tmp_path)) == sorted(t.name for t in TARGETS) != []


def test_the_same_release_on_both_sides_is_refused():
    with pytest.raises(UsageError, match="both 0.30.0: the two sides would be the same code"):
        scaffold.check_pair("0.30.0", " 0.30.0")
    assert scaffold.check_pair(" 0.29.0", "0.30.0") == ("0.29.0", "0.30.0")


def test_the_module_name_comes_from_the_upstream_file():
    assert scaffold.default_module("vllm/model_executor/models/keye.py") == "keye"
    assert scaffold.default_module("vllm/v1/utils.py") == "v1_utils"
    assert scaffold.class_name("v1_utils") == "V1UtilsInputs"


def test_the_committed_cpu_gpu_buffer_copies_are_the_scaffold_plus_adapted_lines(tmp_path):
    """legacy|optimized/v1_utils.py were written by new-target: its slices are still their code, and the
    lines the contributor changed are exactly the ADAPTED ones (docstring aside)."""
    sources = {version: packs.release_source(version) for version in PAIR}
    if not all(sources.values()):
        pytest.skip("no source pack nor cached wheel of vllm 0.29.0/0.30.0 (python -m fuzz sources fetch ...)")
    result = scaffold.plan("x-copy", ["vllm/v1/utils.py::CpuGpuBuffer.copy_to_gpu"], PAIR, sources, module="v1x",
                           also=["vllm/v1/utils.py::CpuGpuBuffer.__init__"], root=checkout(tmp_path))
    for side in common.SIDES:
        scaffolded = result.files[f"{side}/v1x.py"]
        committed = (ROOT / side / "v1_utils.py").read_text()
        body = lambda text: text[text.index("class CpuGpuBuffer"):]  # noqa: E731
        assert body(scaffolded) == body(committed)
        ours = [line for line in committed[committed.index('"""\n', 10) + 4:committed.index("class ")].splitlines()
                if line.strip() and not line.startswith("#")]
        theirs = [line for line in textwrap.dedent(scaffolded[scaffolded.index('"""\n', 10) + 4:
                                                              scaffolded.index("class ")]).splitlines()
                  if line.strip() and not line.startswith("#")]
        assert [line for line in ours if line not in theirs] == [line for line in ours if "# ADAPTED:" in line
                                                                 and line not in theirs]


def test_definitions_that_are_the_same_text_in_both_releases_are_said_first(tmp_path):
    """A newcomer scaffolded a method whose own text had not changed (the change was in a helper it calls):
    the copies came out the same code, and nothing said so (lab/cpu-runs/2026-12-06-newcomer-trial.md)."""
    same = {"0.29.0": TextSource({PATH: NEW}, "0.29.0"), "0.30.0": TextSource({PATH: NEW}, "0.30.0")}
    result = plan(tmp_path, sources=same)
    assert result.todo[0].startswith("the definitions named are the same text in vllm 0.29.0 and 0.30.0")
    assert not plan(tmp_path / "other").todo[0].startswith("the definitions named are the same text")


def test_a_pack_without_the_file_is_passed_over_for_the_wheel(tmp_path, monkeypatch):
    import zipfile

    wheel = tmp_path / "vllm-0.29.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(PATH, OLD)
    monkeypatch.setattr(scaffold, "find_pack", lambda version: TextSource({"vllm/other.py": "x = 1\n"}, version))
    monkeypatch.setattr(scaffold, "cached_wheel", lambda version, cache: wheel)
    source = scaffold._source_holding("0.29.0", [PATH], tmp_path)
    assert source.read_raw(PATH) == OLD
    holding = TextSource({PATH: OLD}, "0.29.0")
    monkeypatch.setattr(scaffold, "find_pack", lambda version: holding)
    assert scaffold._source_holding("0.29.0", [PATH], tmp_path) is holding
