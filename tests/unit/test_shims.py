"""Sides from vllm main: compatibility shims followed to the module they point to (fuzz/releases/shims.py).

Trees here are the shipped 0.34.0 pack with catalog modules moved under vllm/foundation/ and a shim left at
the old path (tests/shimtrees.py); main's own shim form is recorded in tests/data/vllm-main-shims.json.
"""

from __future__ import annotations

import json

import pytest

from fuzz.releases.packs import PackSource, catalog_paths, read_manifest, write_pack
from fuzz.releases.shims import MAX_HOPS, resolve, shim_target
from fuzz.releases.sides import _identity
from fuzz.releases.sources import TextSource, TreeSource
from tests.shimtrees import (
    FORMS,
    GPU_SYNC_DEBUG,
    MOVES,
    PACK,
    TORCH_UTILS,
    main_facts,
    plain_tree,
    shim_text,
    shimmed_tree,
)

# --------------------------------------------------------------------------- what a shim is


@pytest.mark.parametrize("form", FORMS)
def test_every_shim_form_names_the_module_it_points_to(form):
    target = "vllm.foundation.utilities.torch_utils"
    assert shim_target(shim_text(form, target, TORCH_UTILS), TORCH_UTILS) == target


@pytest.mark.parametrize("entry", main_facts()["shims"], ids=lambda e: e["path"])
def test_mains_shims_as_recorded_are_followed(entry):
    """The forms read on vllm main (tests/data/vllm-main-shims.json): a sys.modules alias, a lazy __getattr__."""
    form = {"sys.modules alias": "main-alias", "lazy __getattr__ delegation": "main-lazy"}[entry["form"]]
    text = shim_text(form, entry["target"], entry["path"])
    assert abs(len(text) - entry["chars"]) <= 12  # the same few lines main has (its docstring differs a little)
    assert shim_target(text, entry["path"]) == entry["target"]


def test_a_package_init_shim_resolves_to_the_package_init():
    source = TextSource({"vllm/kernels/triton/__init__.py": shim_text("main-lazy", "vllm.backends.kernels.triton"),
                         "vllm/backends/kernels/triton/__init__.py": "def f():\n    return 1\n"})
    found = source.resolve("vllm/kernels/triton/__init__.py")
    assert found.path == "vllm/backends/kernels/triton/__init__.py" and found.text.startswith("def f")


@pytest.mark.parametrize("text", [
    "from vllm.foundation.utilities.torch_utils import *\n\n\ndef async_tensor_h2d(x):\n    return x\n",
    "from vllm.foundation.utilities.torch_utils import *\n\nPIN_MEMORY = False\n",
    "from vllm.foundation.utilities.torch_utils import *\n\n\nclass Buffer:\n    pass\n",
    "from vllm.a import x\nfrom vllm.b import y\n",  # two modules: not one module moved
    "import vllm.foundation.utilities.torch_utils\n",  # binds `vllm`, re-exports nothing
    "import importlib\nimport sys\n",
    "",
    "def __getattr__(name):\n    return 42\n",
    "import importlib\n_real = importlib.import_module('vllm.a')\n\n\ndef __getattr__(name):\n"
    "    print(name)\n    return getattr(_real, name)\n",
    "from vllm.foundation.utilities.torch_utils import *\nif x:\n    pass\n",
    "this is not python(\n",
], ids=["def", "constant", "class", "two-modules", "plain-import", "imports-only", "empty", "own-getattr",
        "getattr-with-code", "if", "syntax-error"])
def test_a_module_with_anything_of_its_own_is_not_a_shim(text):
    assert shim_target(text, TORCH_UTILS) is None


def test_the_real_modules_of_the_pack_are_not_shims():
    for path in catalog_paths():
        if (PACK / path).is_file():
            assert shim_target((PACK / path).read_text(), path) is None, path


# --------------------------------------------------------------------------- following them


def test_a_chain_of_shims_is_followed_to_the_module_with_definitions():
    source = TextSource({"vllm/a.py": shim_text("star", "vllm.b"), "vllm/b.py": shim_text("main-alias", "vllm.c"),
                         "vllm/c.py": "def f():\n    return 1\n"})
    found = source.resolve("vllm/a.py")
    assert (found.path, found.via, found.problem) == ("vllm/c.py", ("vllm/a.py", "vllm/b.py"), None)
    assert source.read("vllm/a.py") == "def f():\n    return 1\n"
    assert source.read_raw("vllm/a.py") == shim_text("star", "vllm.b")


def test_a_shim_to_a_missing_module_is_a_problem_naming_both_paths():
    found = TextSource({TORCH_UTILS: shim_text("main-alias", "vllm.foundation.utilities.torch_utils")}).resolve(
        TORCH_UTILS)
    assert found.text is None and found.is_shim and found.raw
    assert TORCH_UTILS in found.problem and "vllm/foundation/utilities/torch_utils.py" in found.problem


def test_a_cycle_and_a_too_long_chain_are_problems_not_hangs():
    cycle = TextSource({"vllm/a.py": shim_text("star", "vllm.b"), "vllm/b.py": shim_text("star", "vllm.a")})
    assert "points back" in cycle.resolve("vllm/a.py").problem and cycle.read("vllm/a.py") is None
    files = {f"vllm/m{i}.py": shim_text("star", f"vllm.m{i + 1}") for i in range(MAX_HOPS + 2)}
    files[f"vllm/m{MAX_HOPS + 2}.py"] = "X = 1\n"
    assert "longer than" in resolve(TextSource(files).read_raw, "vllm/m0.py").problem
    assert resolve(TextSource(files).read_raw, "vllm/m0.py", hops=MAX_HOPS + 3).text == "X = 1\n"


# --------------------------------------------------------------------------- sides from a shimmed tree


def test_the_identity_names_both_paths_and_hashes_the_moved_modules_text(tmp_path):
    plain = plain_tree(tmp_path)
    shimmed = shimmed_tree(tmp_path, {TORCH_UTILS: "main-alias", GPU_SYNC_DEBUG: "warned"})
    before, after = _identity(str(plain), TreeSource(plain)), _identity(str(shimmed), TreeSource(shimmed))
    assert after["shims"] == {TORCH_UTILS: MOVES[TORCH_UTILS], GPU_SYNC_DEBUG: MOVES[GPU_SYNC_DEBUG]}
    assert after["files"] == before["files"]  # the same code: a file hash covers the module the shim names
    assert "shims" not in before and "shim_problems" not in after
    assert after["files_sha256"] != before["files_sha256"]  # the shims are part of what the side is
    json.dumps(after)  # goes into reports and repro files as it is


def test_a_module_that_keeps_a_definition_of_its_own_is_read_as_it_is(tmp_path):
    """Half moved: it star-imports the new place but still defines async_tensor_h2d. Not a shim."""
    root = plain_tree(tmp_path)
    own = (root / TORCH_UTILS).read_text()
    (root / TORCH_UTILS).write_text("from vllm.foundation.utilities.torch_utils import *  # noqa\n" + own)
    tree = TreeSource(root)
    found = tree.resolve(TORCH_UTILS)
    assert not found.is_shim and found.path == TORCH_UTILS and tree.read(TORCH_UTILS) == tree.read_raw(TORCH_UTILS)
    assert "shims" not in _identity(str(root), tree)


def test_a_pack_written_from_a_shimmed_tree_holds_the_moved_modules_and_reads_the_same(tmp_path):
    shimmed = shimmed_tree(tmp_path, {TORCH_UTILS: "main-alias", GPU_SYNC_DEBUG: "star"})
    (shimmed / "vllm" / "_version.py").write_text('__version__ = version = "0.35.0.dev1"\n')
    tree = TreeSource(shimmed)
    folder = write_pack(tree, tmp_path / "packs", catalog_paths(), {"from": str(shimmed)})
    manifest = read_manifest(folder)
    assert manifest["shims"] == {TORCH_UTILS: MOVES[TORCH_UTILS], GPU_SYNC_DEBUG: MOVES[GPU_SYNC_DEBUG]}
    assert set(MOVES.values()) <= set(manifest["files"]) and TORCH_UTILS in manifest["files"]
    pack = PackSource(folder)
    assert pack.read_raw(TORCH_UTILS) == tree.read_raw(TORCH_UTILS)  # the shim kept as it is
    for path in catalog_paths():
        assert pack.read(path) == tree.read(path), path
    assert _identity("vllm==0.35.0.dev1", pack)["files"] == _identity(str(shimmed), tree)["files"]


def test_a_pack_without_shims_writes_the_manifest_it_always_did(tmp_path):
    plain = plain_tree(tmp_path)
    (plain / "vllm" / "_version.py").write_text('__version__ = "0.34.0"\n')
    manifest = read_manifest(write_pack(TreeSource(plain), tmp_path / "packs", catalog_paths(), {"from": "x"}))
    assert "shims" not in manifest and manifest["files"] == read_manifest(PACK)["files"]
