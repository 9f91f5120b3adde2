"""Issue #42, item 1: move the engine's flat modules into packages, one per role, and rewrite every
reference (imports, dotted strings, ``fuzz/X.py`` paths) in code, tests and user docs.

Kept in the lab because a branch written against the flat layout can be brought over with it:
``python3 lab/scripts/relayout_42.py --rewrite-only`` rewrites the references in a checkout whose files
already moved (e.g. after merging such a branch). Lab records (``lab/**/*.md``) keep the names they were
written with: they are dated history.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MOVES = {
    # the commands' logic, each a function of the Python API (fuzz/commands/__init__.py)
    "replay_cmd": "commands.replay",
    "reach_cmd": "commands.coverage",
    "corpusmerge": "commands.corpusmerge",
    # the run's orchestration and its processes
    "session": "run.session",
    "selftest": "run.selftest",
    "xdist_items": "run.xdist_items",
    "xdist_last": "run.xdist_last",
    "orchestrate": "run.orchestrate",
    "workers": "run.workers",
    "isolation": "run.isolation",
    "triage": "run.triage",
    "replay": "run.replay",
    "child": "run.child",
    "gpushare": "run.gpushare",
    "plan": "run.plan",
    "budget": "run.budget",
    "limits": "run.limits",
    "interrupts": "run.interrupts",
    # one example, in process
    "runner": "engine.runner",
    "repro": "engine.repro",
    "execute": "engine.execute",
    "stagetimes": "engine.stagetimes",
    "devices": "engine.devices",
    "upstream": "engine.upstream",
    "journals": "engine.journals",
    # the generic oracles
    "compare": "oracles.compare",
    "outcome": "oracles.outcome",
    "syncs": "oracles.syncs",
    "syncrule": "oracles.syncrule",
    "stress": "oracles.stress",
    # reach: what each side ran, the change's coverage
    "reach": "reach.collect",
    "reach_monitor": "reach.monitor",
    "changes": "reach.changes",
    # code compared as code: read by the release tooling and by reach, below both
    "codediff": "code.codediff",
    "syncdiff": "code.syncdiff",
    # reports and their renderers, the checks before any work
    "report": "reports.report",
    "formats": "reports.formats",
    "html": "reports.html",
    "charts": "reports.charts",
    "merge": "reports.merge",
    "scope": "reports.scope",
    "trend": "reports.trend",
    "machine": "reports.machine",
    "preflight": "reports.preflight",
    "outputs": "reports.outputs",
    # the torch-free records
    "model": "records.model",
    "verdicts": "records.verdicts",
    "reachdata": "records.reachdata",
}

SUFFIXES = {".py", ".md", ".toml", ".sh", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".json"}
SKIP_PARTS = {"sources", ".git", "fuzz-corpus", "__pycache__", "vllm_syncfuzz.egg-info"}

_names = "|".join(sorted(map(re.escape, MOVES), key=len, reverse=True))
DOTTED = re.compile(rf"(?<![\w.])fuzz\.({_names})(?!\w)")
FROM_FUZZ = re.compile(rf"^(\s*)from fuzz import ({_names})\b(.*)$", re.M)
PATHS = re.compile(rf"(?<![\w/])fuzz/({_names})\.py\b")


def rewrite(text: str) -> str:
    def from_line(m: re.Match[str]) -> str:
        package, _, module = MOVES[m.group(2)].rpartition(".")
        rest = m.group(3)
        alias = "" if rest.lstrip().startswith("as ") else f" as {m.group(2)}" if module != m.group(2) else ""
        return f"{m.group(1)}from fuzz.{package} import {module}{alias}{rest}"

    text = FROM_FUZZ.sub(from_line, text)
    text = DOTTED.sub(lambda m: f"fuzz.{MOVES[m.group(1)]}", text)
    return PATHS.sub(lambda m: "fuzz/" + MOVES[m.group(1)].replace(".", "/") + ".py", text)


def files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if not path.is_file() or path.suffix not in SUFFIXES or SKIP_PARTS & set(rel.parts):
            continue
        if rel.parts[0] == "lab" and path.suffix == ".md":
            continue  # dated records keep their names
        if rel.parts[:2] == ("lab", "scripts") and path.name == Path(__file__).name:
            continue
        out.append(path)
    return out


def move() -> None:
    for old, new in MOVES.items():
        src = ROOT / "fuzz" / f"{old}.py"
        dst = ROOT / "fuzz" / (new.replace(".", "/") + ".py")
        dst.parent.mkdir(exist_ok=True)
        subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)


def main(argv: list[str]) -> None:
    if "--rewrite-only" in argv:
        # After the move ``fuzz.reach`` names a package: its old meaning cannot be told from the new one, so a
        # branch's leftover ``fuzz.reach`` import is left to fail loudly rather than rewritten twice.
        global DOTTED, FROM_FUZZ, PATHS
        names = "|".join(sorted(map(re.escape, set(MOVES) - {"reach"}), key=len, reverse=True))
        DOTTED = re.compile(rf"(?<![\w.])fuzz\.({names})(?!\w)")
        FROM_FUZZ = re.compile(rf"^(\s*)from fuzz import ({names})\b(.*)$", re.M)
        PATHS = re.compile(rf"(?<![\w/])fuzz/({names})\.py\b")
    else:
        move()
    changed = 0
    for path in files():
        text = path.read_text()
        new = rewrite(text)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"rewrote {changed} files")


if __name__ == "__main__":
    main(sys.argv[1:])
