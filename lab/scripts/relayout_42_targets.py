"""Issue #42, item 2: a target's own code in one folder, ``strategies/<module>/``.

Moves each copy module's input models (``strategies/M.py`` -> ``strategies/M/inputs.py``), record
(``fuzz/catalog/M.py`` -> ``strategies/M/record.py``) and oracles (``fuzz/oracles/M.py`` ->
``strategies/M/oracles.py``) and rewrites every reference. The first move's planted bugs were split by a
one-off script into ``strategies/M/planted.py`` (their families spanned several targets).

``--bring M [M ...]`` brings the targets of a branch written against the old layout (merged first): their
``tests/planted/M.py`` moves too, the folder gets its ``__init__.py``, and their imports of the engine
become imports of ``fuzz.api``. ``--rewrite-only M [M ...]`` only rewrites references.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from relayout_42 import files  # noqa: E402 -- the same set of files as item 1's move

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("inputs", "record", "oracles", "planted")


def modules() -> list[str]:
    return sorted(p.stem for p in (ROOT / "fuzz" / "catalog").glob("*.py") if p.stem != "__init__")


def rewrite(text: str, names: list[str]) -> str:
    alt = "|".join(map(re.escape, names))
    kinds = "|".join(KINDS)
    text = re.sub(rf"(?<![\w.])fuzz\.oracles\.({alt})(?!\w)", r"strategies.\1.oracles", text)
    text = re.sub(rf"(?<![\w/])fuzz/oracles/({alt})\.py\b", r"strategies/\1/oracles.py", text)
    text = re.sub(rf"(?<![\w.])fuzz\.catalog\.({alt})(?!\w)", r"strategies.\1.record", text)
    text = re.sub(rf"(?<![\w/])fuzz/catalog/({alt})\.py\b", r"strategies/\1/record.py", text)
    text = re.sub(rf"(?<![\w.])strategies\.({alt})(?!\w)(?!\.(?:{kinds})\b)", r"strategies.\1.inputs", text)
    text = re.sub(rf"(?<![\w/])strategies/({alt})\.py\b", r"strategies/\1/inputs.py", text)
    text = re.sub(r"^(\s*)from fuzz\.catalog import TARGETS as (\w+)$",
                  r"\1from fuzz.targets import catalog_targets\n\1\2 = catalog_targets()", text, flags=re.M)
    text = re.sub(r"^(\s*)from fuzz\.catalog import TARGETS$",
                  r"\1from fuzz.targets import catalog_targets\n\1TARGETS = catalog_targets()", text, flags=re.M)
    return text


def move(names: list[str], planted: bool = False) -> None:
    for m in names:
        folder = ROOT / "strategies" / m
        folder.mkdir(exist_ok=True)
        moves = [(f"strategies/{m}.py", "inputs"), (f"fuzz/catalog/{m}.py", "record"),
                 (f"fuzz/oracles/{m}.py", "oracles")] + ([(f"tests/planted/{m}.py", "planted")] if planted else [])
        for src, kind in moves:
            if (ROOT / src).exists():
                subprocess.run(["git", "mv", src, f"strategies/{m}/{kind}.py"], cwd=ROOT, check=True)


ENGINE_IMPORTS = [
    (re.compile(r"^(\s*)from tests\.planted\.plant import ", re.M), r"\1from fuzz.api import "),
    (re.compile(r"^(\s*)from fuzz\.targets import (Comparison, Target|Target|Comparison)$", re.M),
     r"\1from fuzz.api import \2"),
    (re.compile(r"^(\s*)from fuzz\.oracles import ", re.M), r"\1from fuzz.api import "),
]


def bring(names: list[str]) -> None:
    """A merged old-layout branch's targets, into their folders."""
    move(names, planted=True)
    for m in names:
        init = ROOT / "strategies" / m / "__init__.py"
        if not init.exists():
            init.write_text(f'"""The {m} targets: everything of them but their copies.\n\ninputs.py holds the '
                            f'input models, record.py the records, oracles.py the oracles, planted.py the\n'
                            f'planted bugs and benign refactors. The copies are legacy/{m}.py and optimized/{m}.py.'
                            f'\n"""\n')
        for path in (ROOT / "strategies" / m).glob("*.py"):
            text = path.read_text()
            for pattern, replacement in ENGINE_IMPORTS:
                text = pattern.sub(replacement, text)
            path.write_text(text)


def main(argv: list[str]) -> None:
    named = [a for a in argv if not a.startswith("--")]
    names = named or modules()
    if "--bring" in argv:
        bring(names)
    elif "--rewrite-only" not in argv:
        move(names)
    changed = 0
    for path in files():
        text = path.read_text()
        new = rewrite(text, names)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"moved {len(names)} targets' code; rewrote {changed} files")


if __name__ == "__main__":
    main(sys.argv[1:])
