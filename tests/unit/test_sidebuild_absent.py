"""A definition the requested release does not have is left out of the rebuilt side (fuzz/releases/sidebuild.py
``_still_needed``, docs/sides.md): the build fails only where the release's remaining code still needs it.
Toy copies in a temporary project; then the staging buffers rebuilt from 0.28.0, which predates
``NonUvaBuffer`` and ``UvaBuffer.uva()``."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

import fuzz.releases.sidebuild as sidebuild
from fuzz.releases.sidebuild import ModuleBuild, build_module
from fuzz.releases.sides import bind, unbuilt
from fuzz.releases.sources import TextSource
from fuzz.targets import lookup

PATH = "vllm/toy.py"

# The copy's release: a buffer with a uva() method, a fallback class and a helper, none of which the older
# release below has; that release sets an attribute ``uva`` instead and slices it.
BASE = textwrap.dedent('''\
    import torch


    def helper(n):
        return n + 1


    class Buf:
        def __init__(self, n):
            self._uva = torch.zeros(n)

        def uva(self, n):
            return self._uva[:n]


    class Fallback:
        def __init__(self, n):
            self._uva = torch.ones(n)


    class Pool:
        def __init__(self, n):
            self.cls = Buf
            self.bufs = [self.cls(n)]

        def copy(self, n):
            return self.bufs[0].uva(n)
    ''')
OLDER = textwrap.dedent('''\
    import torch


    class Buf:
        def __init__(self, n):
            self.uva = torch.zeros(n)


    class Pool:
        def __init__(self, n):
            self.cls = Buf
            self.bufs = [self.cls(n)]

        def copy(self, n):
            return self.bufs[0].uva[:n]
    ''')


def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy: str, older: str | None,
          base: str = BASE) -> ModuleBuild:
    """``legacy/toy.py`` (``copy``, taken from ``base``) rebuilt from a release holding ``older`` (None: a
    release without the file)."""
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "toy.py").write_text(copy)
    monkeypatch.setattr(sidebuild, "PROJECT_ROOT", tmp_path)
    new = TextSource({PATH: older} if older is not None else {}, "0.28.0", "vllm==0.28.0")
    return build_module("toy", "legacy", TextSource({PATH: base}, "0.33.0"), new, [PATH], "pkg")


def load(text: str, tmp_path: Path):
    file = tmp_path / "rebuilt.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location("rebuilt_toy", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_definitions_the_release_lacks_and_nothing_needs_are_left_out(tmp_path, monkeypatch):
    got = build(tmp_path, monkeypatch, BASE, OLDER)
    assert got.failed == {} and got.error is None
    assert set(got.removed) == {"helper", "Buf.uva", "Fallback", "Fallback.__init__"}
    assert "is not in vllm==0.28.0 (vllm/toy.py)" in got.removed["Fallback"]
    assert "class Fallback" not in got.text and "def helper" not in got.text and "def uva" not in got.text
    assert unbuilt(got, "Pool.copy") is None  # `.uva` is the attribute Buf.__init__ assigns now
    pool = load(got.text, tmp_path).Pool(4)
    assert pool.copy(2).tolist() == [0.0, 0.0]


def test_a_definition_whose_body_still_names_a_missing_function_fails_naming_it(tmp_path, monkeypatch):
    base = BASE + "\n\ndef run(n):\n    return helper(n)\n"
    got = build(tmp_path, monkeypatch, base, OLDER + "\n\ndef run(n):\n    return helper(n)\n", base)
    assert "helper" in got.removed and "def helper" not in got.text
    assert got.failed["run"] == "run uses helper, but helper is not in vllm==0.28.0 (vllm/toy.py)"
    assert unbuilt(got, "run") == got.failed["run"]
    assert unbuilt(got, "Pool.copy") is None  # another entry point, which does not need it, still builds


def test_reading_a_removed_method_nothing_else_supplies_fails_naming_it(tmp_path, monkeypatch):
    older = OLDER.replace("self.uva = torch.zeros(n)", "self._uva = torch.zeros(n)")  # no attribute `uva` then
    older = older.replace("return self.bufs[0].uva[:n]", "return self.bufs[0].uva(n)")
    got = build(tmp_path, monkeypatch, BASE, older)
    problem = unbuilt(got, "Pool.copy")
    assert problem is not None and problem.startswith("Pool.copy uses .uva, but Buf.uva is not in vllm==0.28.0")
    assert "nothing else defines or assigns .uva" in problem


def test_a_removed_definition_the_import_needs_stays_failed(tmp_path, monkeypatch):
    base = BASE + "\n\nDEFAULT = helper(1)\n"  # a module-level statement of the copy, kept as it is
    got = build(tmp_path, monkeypatch, base, OLDER, base)
    assert "helper" not in got.removed and "def helper" in got.text
    assert got.failed["helper"] == "helper is not in vllm==0.28.0 (vllm/toy.py)"
    load(got.text, tmp_path)  # it imports


def test_a_release_without_the_file_says_so_as_before(tmp_path, monkeypatch):
    got = build(tmp_path, monkeypatch, BASE, None)
    assert got.removed == {} and "Pool.copy" in got.failed
    assert unbuilt(got, "Pool.copy") == "Buf is not in vllm==0.28.0 (vllm/toy.py) (+5 more)"


def test_an_entry_point_the_release_lacks_cannot_be_built(tmp_path, monkeypatch):
    got = build(tmp_path, monkeypatch, BASE, OLDER)
    assert unbuilt(got, "Fallback.__init__") == ("Fallback.__init__ is not in vllm==0.28.0 "
                                                 "(nor is its class Fallback)")


def test_the_staging_buffers_rebuilt_from_0_28_0_have_its_attribute_and_no_fallback():
    staged, = lookup(["staged-write-tensor-apply-write"])
    module = bind(staged, legacy="vllm==0.28.0").impl("legacy").module
    assert not hasattr(module, "NonUvaBuffer") and not hasattr(module, "_num_write_chunks")
    assert "uva" not in vars(module.UvaBuffer)  # 0.28.0 assigns self.uva in __init__
    assert "self.uva = get_accelerator_view_from_cpu_tensor" in Path(module.__file__).read_text()


def test_a_class_left_with_no_statement_keeps_its_members_failed(tmp_path, monkeypatch):
    """Leaving out every member the release lacks would leave ``class Empty:`` with no body, which does not
    parse: its members stay, failed, and the module still imports."""
    base = BASE + "\n\nclass Empty:\n    def only(self):\n        return 1\n"
    older = OLDER + "\n\nclass Empty:\n    \"\"\"Its one method came later.\"\"\"\n"
    got = build(tmp_path, monkeypatch, base, older, base)
    assert "Empty.only" not in got.removed and "Empty.only" in got.failed
    assert "def only" in got.text
    load(got.text, tmp_path)  # it imports
