"""vllm trees that move catalog modules and leave compatibility shims behind, as vLLM main does after 0.34.0
(fuzz/releases/shims.py; what main's shims look like: tests/data/vllm-main-shims.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fuzz.releases.packs import SHIPPED_PACKS

PACK = SHIPPED_PACKS / "vllm-0.34.0"
MAIN_SHIMS = Path(__file__).resolve().parent / "data" / "vllm-main-shims.json"
TORCH_UTILS = "vllm/utils/torch_utils.py"
GPU_SYNC_DEBUG = "vllm/utils/gpu_sync_debug.py"
FLA = "vllm/third_party/flash_linear_attention/ops/index.py"
# Where main moved them (tests/data/vllm-main-shims.json).
MOVES = {TORCH_UTILS: "vllm/foundation/utilities/torch_utils.py",
         GPU_SYNC_DEBUG: "vllm/foundation/utilities/gpu_sync_debug.py"}
FORMS = ("main-alias", "main-lazy", "star", "star-all", "named", "direct", "module-name", "warned", "relative")


def module(path: str) -> str:
    return path[:-3].replace("/", ".")


def main_facts() -> dict:
    return json.loads(MAIN_SHIMS.read_text())


def shim_text(form: str, target: str, old: str = "vllm/utils/x.py") -> str:
    """A shim at ``old`` for the dotted module ``target``, in one of ``FORMS``. The two ``main-`` forms are
    written from the facts recorded in tests/data/vllm-main-shims.json (header, docstring, statements)."""
    package, _, leaf = target.rpartition(".")
    header = ("# SPDX-License-Identifier: Apache-2.0\n# SPDX-FileCopyrightText: Copyright contributors to the vLLM "
              "project\n# ruff: noqa: E501\n# COMPAT SHIM (auto-generated): old path -> canonical new path\n\n")
    old_name = old[:-3].replace("/", ".").rsplit(".", 1)
    if form == "main-alias":
        return (header + f'"""Compatibility shim: {old_name[0]}/{old_name[1]} -> {target} (sys.modules alias)."""\n\n'
                f'import importlib\nimport sys\n\n_real = importlib.import_module("{target}")\n'
                "sys.modules[__name__] = _real\n")
    if form == "main-lazy":
        return (header + f'"""Compatibility shim: {old_name[0]}/{old_name[1]} -> {target} '
                '(lazy __getattr__ delegation)."""\n\nimport importlib as _importlib\n\n'
                f'_real = _importlib.import_module("{target}")\n\n\ndef __getattr__(name):\n'
                "    return getattr(_real, name)\n\n\ndef __dir__():\n    return dir(_real)\n\n\n"
                '__all__ = getattr(_real, "__all__", [])\n')
    if form == "star":
        return f"from {target} import *  # noqa: F403\n"
    if form == "star-all":
        return f'"""Moved to {target}."""\nfrom {target} import *  # noqa: F403\nfrom {target} import __all__\n'
    if form == "named":
        return (f"from {target} import (  # noqa: F401\n    async_tensor_h2d,\n    gpu_sync_allowed as allowed,\n)\n\n"
                '__all__ = ["async_tensor_h2d", "allowed"]\n')
    if form == "direct":
        return f'import importlib\nimport sys\n\nsys.modules[__name__] = importlib.import_module("{target}")\n'
    if form == "module-name":
        return f"import sys\n\nfrom {package} import {leaf} as _moved\n\nsys.modules[__name__] = _moved\ndel sys\n"
    if form == "warned":
        return ("import warnings\n\nwarnings.warn(\n    f\"{__name__} has moved\", DeprecationWarning, stacklevel=2)\n"
                f"with warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n"
                f"    from {target} import *  # noqa: F403\n")
    if form == "relative":
        depth = old.count("/")  # vllm/utils/x.py: `..` is vllm
        return f"from {'.' * depth}{target.partition('.')[2]} import *  # noqa: F403\n"
    raise ValueError(form)


def pack_checkout(pack: Path, root: Path, edits: dict[str, tuple[str, str]] = {}) -> Path:  # noqa: B006
    """A shipped source ``pack`` as a checkout at ``root`` (no manifest), with ``{path: (old, new)}`` applied."""
    shutil.copytree(pack, root)
    (root / "MANIFEST.json").unlink()
    for path, (old, new) in edits.items():
        text = (root / path).read_text()
        assert old in text, f"{old!r} is not in {path}"
        (root / path).write_text(text.replace(old, new, 1))
    return root


def plain_tree(tmp_path: Path, name: str = "plain", edits: dict[str, tuple[str, str]] = {}) -> Path:  # noqa: B006
    """The shipped 0.34.0 pack as a checkout (no manifest), with ``{path: (old, new)}`` applied."""
    return pack_checkout(PACK, tmp_path / name, edits)


def shimmed_tree(tmp_path: Path, forms: dict[str, str], name: str = "shimmed",
                 edits: dict[str, tuple[str, str]] = {}) -> Path:  # noqa: B006
    """``plain_tree`` with each path of ``forms`` moved where main put it and a shim of that form left behind.
    ``edits`` are applied before the move (a path names the module by its old place)."""
    root = plain_tree(tmp_path, name, edits)
    for old, form in forms.items():
        new = MOVES[old]
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        (root / old).rename(root / new)
        (root / old).write_text(shim_text(form, module(new), old))
    return root
