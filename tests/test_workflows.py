"""The CI workflow files run commands the CLI accepts (the ones README documents)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _fuzz_commands(text: str) -> list[str]:
    """`python3 -m fuzz ...` commands, with YAML folding and shell continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    joined = re.sub(r">\n(\s+)(python3 -m fuzz[^\n]*)\n\1(?=\S)", lambda m: ">\n" + m.group(1) + m.group(2) + " ",
                    joined)
    commands, current = [], None
    for line in joined.splitlines():
        stripped = line.strip()
        if "python3 -m fuzz " in stripped:
            if current:
                commands.append(current)
            current = stripped[stripped.index("python3 -m fuzz "):]
        elif (current is not None and stripped and not stripped.startswith(("- ", "#"))
              and ":" not in stripped.split()[0]):
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


def test_ci_runs_the_readme_test_command_then_the_slow_tests():
    readme = (ROOT / "README.md").read_text()
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip().startswith("python3 -m pytest")]
    assert "python3 -m pytest -n 2\n" in readme
    assert commands[0] == "python3 -m pytest -n 2"  # exactly the README's command, first
    assert commands[1].startswith("python3 -m pytest -n 2 -m slow")  # then what the default run leaves out


def test_the_default_test_run_leaves_out_the_slow_tests(tmp_path):
    """README's command runs `-m "not slow"` (pyproject addopts); `-m slow` on
    the command line overrides it, because pytest keeps the last -m. Checked with
    this project's pytest options on a two-test file (no conftest, no torch import)."""
    (tmp_path / "test_marks.py").write_text(
        "import pytest\n\n\ndef test_fast():\n    pass\n\n\n@pytest.mark.slow\ndef test_slow():\n    pass\n")

    def collected(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                               str(tmp_path), "--collect-only", "-q", "-n", "0", *args, "test_marks.py"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return [line.split("::")[1] for line in done.stdout.splitlines() if "::" in line]

    assert collected() == ["test_fast"]
    assert collected("-m", "slow") == ["test_slow"]
