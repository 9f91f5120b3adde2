"""fuzz/code/codediff.py: definitions compared as code (comments, docstrings and layout aside), and the
definitions that differ between two vllm sources (docs/reach.md)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fuzz.code.codediff import Change, changed_definitions, definitions, digest, digests
from fuzz.releases.packs import PackSource, catalog_paths
from fuzz.releases.sources import TextSource

ROOT = Path(__file__).resolve().parents[2]

BASE = textwrap.dedent('''\
    import torch


    def helper(x, scale=2):
        """Scales x."""
        y = x * scale  # the scaling
        return y


    @torch.no_grad()
    def decorated(x):
        return helper(x)


    class Base:
        pass


    class Model(Base):
        """A model."""

        size = 4

        def forward(self, x):
            """Runs it."""
            if x is None:
                return None
            return helper(x) + self.size

        def other(self):
            return 1
''')


def one(text: str, qualname: str) -> str:
    return digests(text)[qualname]


def edited(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new)


# --------------------------------------------------------------------------- what a digest ignores

def test_definitions_lists_functions_methods_and_classes_with_lines():
    found = definitions(BASE)
    assert list(found) == ["helper", "decorated", "Base", "Model", "Model.forward", "Model.other"]
    assert found["helper"].kind == "function" and found["Model"].kind == "class"
    rows = BASE.splitlines()
    for qualname, unit in found.items():
        name = qualname.rpartition(".")[2]
        assert rows[unit.first_line - 1].lstrip().startswith((f"def {name}(", f"class {name}")), qualname
        assert unit.first_line <= unit.last_line
    # The decorator comes before the def line: first_line is the def line.
    assert rows[found["decorated"].first_line - 2].strip() == "@torch.no_grad()"
    assert found["Model"].last_line == found["Model.other"].last_line
    assert len(found["helper"].digest) == 16 and int(found["helper"].digest, 16) >= 0


def test_a_digest_ignores_comments_docstrings_and_blank_lines():
    noisy = textwrap.dedent('''\
        import torch
        # a new comment


        def helper(x, scale=2):
            """A different docstring,
            on two lines."""

            # comment
            y = x * scale   # another comment

            return y
    ''')
    assert one(noisy, "helper") == one(BASE, "helper")
    bare = edited('        """Runs it."""\n', "", edited('    """A model."""\n\n', ""))
    assert one(bare, "Model") == one(BASE, "Model")
    assert one(bare, "Model.forward") == one(BASE, "Model.forward")
    # A body that is only a docstring is code that does nothing.
    assert one('def f():\n    "doc"\n', "f") == one("def f():\n    pass\n", "f")


def test_a_digest_ignores_the_indentation_of_a_whole_def():
    top = "def helper(x, scale=2):\n    y = x * scale\n    return y\n"
    nested = "class Holder:\n    def helper(x, scale=2):\n        y = x * scale\n        return y\n"
    deeper = "class A:\n    class B:\n            def helper(x, scale=2):\n                    y = x * scale\n" \
             "                    return y\n"
    assert one(top, "helper") == one(nested, "Holder.helper") == one(deeper, "A.B.helper") == one(BASE, "helper")
    # Lines moved (more code above) do not change it either: line numbers never count.
    assert one("\n\n\nX = 1\n" + top, "helper") == one(top, "helper")


def test_digest_of_a_node_is_that_of_definitions():
    import ast

    node = ast.parse(BASE).body[1]
    assert digest(node) == definitions(BASE)["helper"].digest


# --------------------------------------------------------------------------- what a digest sees

@pytest.mark.parametrize("qualname, old, new", [
    ("helper", "y = x * scale", "y = x / scale"),  # a statement
    ("helper", "return y", "return y + 0"),
    ("helper", "scale=2", "scale=3"),  # a default value
    ("helper", "def helper(x, scale=2)", "def helper(x, *, scale=2)"),  # the signature
    ("decorated", "@torch.no_grad()", "@torch.inference_mode()"),  # a decorator
    ("Model", "class Model(Base)", "class Model(Base, object)"),  # a base class
    ("Model", "size = 4", "size = 5"),  # a class statement
    ("Model.forward", "if x is None", "if x is not None"),
])
def test_a_changed_statement_decorator_default_or_base_changes_the_digest(qualname, old, new):
    before, after = digests(BASE), digests(edited(old, new))
    assert after[qualname] != before[qualname]
    assert {q for q in before if before[q] != after[q]} == {qualname}


def test_removing_a_decorator_changes_the_digest():
    assert one(edited("@torch.no_grad()\n", ""), "decorated") != one(BASE, "decorated")


def test_a_class_own_code_excludes_its_methods():
    before = digests(BASE)
    after = digests(edited("return helper(x) + self.size", "return helper(x) - self.size"))
    assert after["Model.forward"] != before["Model.forward"]
    assert after["Model"] == before["Model"]  # a method change changes only the method
    # Even a method added or removed leaves the class's own code as it was.
    added = digests(edited("    def other(self):\n        return 1\n",
                           "    def other(self):\n        return 1\n\n    def third(self):\n"
                           "        return 3\n"))
    assert added["Model"] == before["Model"] and "Model.third" in added
    removed = digests(edited("    def other(self):\n        return 1\n", ""))
    assert removed["Model"] == before["Model"] and "Model.other" not in removed


def test_a_nested_class_is_its_own_definition_and_a_nested_function_belongs_to_its_function():
    text = textwrap.dedent('''\
        class Outer:
            x = 1

            class Inner:
                def m(self):
                    return 11

        def f():
            def g():
                return 22
            return g()
    ''')
    found = definitions(text)
    assert set(found) == {"Outer", "Outer.Inner", "Outer.Inner.m", "f"}
    changed = digests(text.replace("return 11", "return 12"))
    assert changed["Outer.Inner.m"] != found["Outer.Inner.m"].digest
    assert changed["Outer"] == found["Outer"].digest and changed["Outer.Inner"] == found["Outer.Inner"].digest
    inner = digests(text.replace("return 22", "return 23"))
    assert inner["f"] != found["f"].digest


def test_async_functions_are_definitions():
    found = definitions("async def g(x):\n    return await x\n")
    assert found["g"].kind == "function"
    assert one("async def g(x):\n    return await x\n", "g") != one("def g(x):\n    return x\n", "g")


def test_digests_keeps_the_qualnames_asked_for_that_the_module_has():
    assert list(digests(BASE, ["Model.forward", "missing", "helper"])) == ["Model.forward", "helper"]
    assert digests(BASE, []) == {}
    assert set(digests(BASE)) == set(definitions(BASE))


# --------------------------------------------------------------------------- changed_definitions

PATH = "vllm/model_executor/models/toy.py"
OTHER = "vllm/model_executor/models/other.py"


def source(files: dict[str, str], version: str = "0.28.0") -> TextSource:
    return TextSource(files, version=version)


def test_changed_added_and_removed_definitions_with_paths_and_lines():
    new_text = edited("scale=2", "scale=3")  # helper changed
    new_text = edited("    def other(self):\n        return 1\n",
                      "    def third(self):\n        return 3\n", new_text)  # other removed, third added
    new_text = edited("@torch.no_grad()\ndef decorated(x):\n    return helper(x)\n",
                      "@torch.no_grad()\ndef decorated(x):\n    # only a comment\n    return helper(x)\n", new_text)
    changes = changed_definitions(source({PATH: BASE}), source({PATH: new_text}, "0.33.0"), [PATH])
    assert all(isinstance(c, Change) for c in changes)
    found = {(c.qualname, c.kind) for c in changes}
    assert found == {("helper", "changed"), ("Model.third", "added"), ("Model.other", "removed")}
    by_name = {c.qualname: c for c in changes}
    assert all(c.path == PATH for c in changes)
    # Lines: the def line in the new source; the old one for a removal.
    assert by_name["helper"].line == definitions(new_text)["helper"].first_line
    assert by_name["Model.third"].line == definitions(new_text)["Model.third"].first_line
    assert by_name["Model.other"].line == definitions(BASE)["Model.other"].first_line
    # Order: file, then changes before removals, then line.
    assert [c.qualname for c in changes] == ["helper", "Model.third", "Model.other"]
    assert by_name["helper"].ref == f"{PATH}::helper"
    assert by_name["Model.other"].to_json() == {"path": PATH, "qualname": "Model.other", "change": "removed",
                                                "line": definitions(BASE)["Model.other"].first_line}


def test_comments_docstrings_and_layout_alone_are_no_change():
    relaid = BASE.replace("# the scaling", "# reworded").replace('"""Runs it."""', '"""Runs the model."""')
    relaid = relaid.replace("\n\n\nclass Base", "\n\n\n\n\nclass Base")
    assert changed_definitions(source({PATH: BASE}), source({PATH: relaid}), [PATH]) == []


def test_a_file_only_one_side_has_counts_whole():
    small = "def a():\n    return 1\n\n\nclass K:\n    def m(self):\n        return 2\n"
    added = changed_definitions(source({PATH: BASE}), source({PATH: BASE, OTHER: small}), [PATH, OTHER])
    assert [(c.path, c.qualname, c.kind, c.line) for c in added] == [
        (OTHER, "a", "added", 1), (OTHER, "K", "added", 5), (OTHER, "K.m", "added", 6)]
    removed = changed_definitions(source({PATH: BASE, OTHER: small}), source({PATH: BASE}), [PATH, OTHER])
    assert {(c.qualname, c.kind) for c in removed} == {("a", "removed"), ("K", "removed"), ("K.m", "removed")}
    assert all(c.path == OTHER for c in removed)


BROKEN = "def broken(:\n    return\n"


def test_a_file_neither_has_or_neither_parses_is_skipped():
    old = source({PATH: BASE, OTHER: BROKEN})
    new = source({PATH: edited("scale=2", "scale=3"), OTHER: BROKEN + "\n# still broken\n"})
    changes = changed_definitions(old, new, [PATH, OTHER, "vllm/nowhere.py"])
    assert [(c.path, c.qualname) for c in changes] == [(PATH, "helper")]
    assert changed_definitions(old, new, ["vllm/nowhere.py"]) == []
    assert changed_definitions(old, new, []) == []


def test_a_file_that_does_not_parse_on_one_side_is_skipped():
    old = source({PATH: BASE, OTHER: "def a():\n    return 1\n"})
    new = source({PATH: edited("scale=2", "scale=3"), OTHER: BROKEN})
    changes = changed_definitions(old, new, [PATH, OTHER])
    assert [(c.path, c.qualname) for c in changes] == [(PATH, "helper")]


def test_changes_are_sorted_by_file_then_line():
    a_path, b_path = "vllm/a.py", "vllm/b.py"
    text = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"
    new = text.replace("return 1", "return 2")
    changes = changed_definitions(source({b_path: text, a_path: text}), source({b_path: new, a_path: new}),
                                  [b_path, a_path])
    assert [(c.path, c.qualname) for c in changes] == [(a_path, "f"), (a_path, "g"), (b_path, "f"), (b_path, "g")]


def test_a_change_to_a_property_getter_followed_by_its_setter_is_a_change():
    text = textwrap.dedent('''\
        class C:
            @property
            def x(self):
                return self._x

            @x.setter
            def x(self, value):
                self._x = value
    ''')
    new = text.replace("return self._x", "return self._x + 1")
    assert changed_definitions(source({PATH: text}), source({PATH: new}), [PATH]) != []


def test_a_change_to_a_function_defined_under_a_module_level_if_is_a_change():
    text = "import sys\n\nif sys.version_info >= (3, 9):\n    def f():\n        return 1\n"
    new = text.replace("return 1", "return 2")
    assert changed_definitions(source({PATH: text}), source({PATH: new}), [PATH]) != []


# --------------------------------------------------------------------------- the real source packs

@pytest.fixture(scope="module")
def packs():
    old, new = ROOT / "sources" / "vllm-0.27.1", ROOT / "sources" / "vllm-0.28.0"
    if not (old.is_dir() and new.is_dir()):
        pytest.skip("the source packs sources/vllm-0.27.1 and sources/vllm-0.28.0 are not in this checkout")
    return PackSource(old), PackSource(new)


@pytest.fixture(scope="module")
def pr_changes(packs):
    return changed_definitions(*packs, catalog_paths())


def test_the_functions_pr_52369_changed_are_listed_as_changed(pr_changes):
    kinds = {c.ref: c.kind for c in pr_changes}
    for ref in ("vllm/model_executor/models/keye.py::KeyeSiglipEncoder.forward",
                "vllm/third_party/flash_linear_attention/ops/index.py::prepare_chunk_offsets",
                "vllm/third_party/flash_linear_attention/ops/index.py::prepare_chunk_indices",
                "vllm/model_executor/models/paddleocr_vl.py::SiglipEncoder.forward",
                "vllm/model_executor/models/glm4_1v.py::Glm4vVisionEmbeddings.forward"):
        assert kinds.get(ref) == "changed", ref
    # The definitions the PR did not touch are not listed: prepare_lens is the same code in both.
    assert "vllm/third_party/flash_linear_attention/ops/index.py::prepare_lens" not in kinds
    assert set(c.path for c in pr_changes) <= set(catalog_paths())


def test_a_pack_change_has_the_line_of_its_def_in_the_new_release(packs, pr_changes):
    _, new = packs
    change = next(c for c in pr_changes if c.ref.endswith("index.py::prepare_chunk_offsets"))
    rows = new.read(change.path).splitlines()
    assert rows[change.line - 1].startswith("def prepare_chunk_offsets(")
    removed = [c for c in pr_changes if c.kind == "removed"]
    old, _ = packs
    for c in removed:
        assert c.qualname.rpartition(".")[2] in old.read(c.path).splitlines()[c.line - 1]


def test_every_catalog_target_claim_that_changed_is_listed(pr_changes):
    """The targets' upstream definitions are those the PR changed (or added): each is in the list."""
    from fuzz.targets import lookup

    listed = {c.ref for c in pr_changes}
    claimed = {ref for t in lookup([]) for ref in t.upstream
               if ref.startswith(("vllm/third_party/flash_linear_attention/ops/index.py::prepare_chunk",
                                  "vllm/model_executor/models/keye.py::KeyeSiglip"))}
    assert claimed and claimed <= listed


def test_a_pack_compared_with_itself_gives_nothing(packs):
    old, _ = packs
    assert changed_definitions(old, old, catalog_paths()) == []
