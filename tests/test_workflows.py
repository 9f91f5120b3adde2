"""The CI workflow files run commands the CLI accepts (the ones README documents)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fuzz.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _fuzz_commands(text: str) -> list[str]:
    """`python3 -m fuzz ...` commands, with YAML folding and shell continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    joined = re.sub(r">\n(\s+)(python3 -m fuzz[^\n]*)\n\1(?=\S)", lambda m: ">\n" + m.group(1) + m.group(2) + " ", joined)
    commands, current = [], None
    for line in joined.splitlines():
        stripped = line.strip()
        if "python3 -m fuzz " in stripped:
            if current:
                commands.append(current)
            current = stripped[stripped.index("python3 -m fuzz "):]
        elif current is not None and stripped and not stripped.startswith(("- ", "#")) and ":" not in stripped.split()[0]:
            current += " " + stripped
        else:
            if current:
                commands.append(current)
            current = None
    if current:
        commands.append(current)
    return commands


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_fuzz_commands_parse(workflow):
    commands = _fuzz_commands(workflow.read_text())
    assert commands, f"{workflow.name} runs no fuzz command"
    readme = (ROOT / "README.md").read_text()
    for command in commands:
        command = re.sub(r'"\$\(.*?\)"', "1", command)
        args = shlex.split(command)[3:]
        build_parser().parse_args(args)  # raises UsageError on anything the CLI does not accept
        assert f"python3 -m fuzz {args[0]}" in readme


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m pytest -n 2" in readme and ci.strip().endswith("python3 -m pytest -n 2")
