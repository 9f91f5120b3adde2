"""The CI workflow files run commands the CLI accepts (the ones README documents)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
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


# A plausible value for each ${{ expression }} the workflows pass to the fuzzer.
EXPRESSIONS = {"matrix.shard": "1", "strategy.job-total": "4", "needs.plan.outputs.seed": "20261206",
               "steps.newest.outputs.side": "vllm==0.34.0"}


def expand(command: str, values: dict[str, str] = EXPRESSIONS) -> str:
    """A workflow command with its ``${{ expression }}`` filled in; an expression without a value fails."""
    def value(match: re.Match) -> str:
        assert match[1] in values, f"no plausible value for ${{{{ {match[1]} }}}} in {command!r}"
        return values[match[1]]
    return re.sub(r"\$\{\{\s*(.+?)\s*\}\}", value, command)


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_fuzz_commands_parse(workflow):
    commands = _fuzz_commands(workflow.read_text())
    assert commands, f"{workflow.name} runs no fuzz command"
    readme = (ROOT / "README.md").read_text()
    for command in commands:
        command = re.sub(r'"\$\(.*?\)"', "1", expand(command))
        command = re.split(r"\s(?:>>?|\|)\s", command)[0]  # a redirection or pipe is the shell's
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


def test_the_nightly_keeps_its_reports_and_shows_the_trend_in_its_summary():
    """Each night's JSON is an artifact; the trend step reads the last nights' (downloaded by that
    artifact's name) and tonight's, its Markdown goes to the job summary and its HTML is uploaded."""
    text = (ROOT / ".github" / "workflows" / "nightly-gpu-fuzz.yml").read_text()
    (trend,) = [c for c in _fuzz_commands(text) if c.startswith("python3 -m fuzz trend ") and "nightly-caller" in c]
    args = build_parser().parse_args(shlex.split(trend)[3:])
    assert args.markdown == "trend.md" and args.html == "trend.html"
    assert args.reports[-1] == "nightly-caller.json" and args.reports[0].startswith("previous/")
    assert "--report nightly-caller.json" in re.sub(r"\s+", " ", text)  # tonight's report is the one written
    assert "name: nightly-fuzz" in text and "nightly*.json" in text  # kept as an artifact...
    assert "gh run download" in text and "--name nightly-fuzz" in text  # ...and read back the next nights
    assert 'cat trend.md >> "$GITHUB_STEP_SUMMARY"' in text
    assert re.search(r"path: \|\n\s+trend\.html", text)


def test_premerge_puts_its_markdown_in_the_job_summary():
    text = (ROOT / ".github" / "workflows" / "premerge.yml").read_text()
    (run,) = [c for c in _fuzz_commands(text) if c.startswith("python3 -m fuzz run ")]
    markdown = build_parser().parse_args(shlex.split(run)[3:]).markdown
    assert f'cat {markdown} >> "$GITHUB_STEP_SUMMARY"' in text


def test_the_nightly_fuzzes_the_pre_pr_release_against_todays_vllm_with_its_own_report_and_trend():
    """Job ``today``: 0.27.1 against the newest shipped pack (``sources list --newest``) and against vLLM main
    where it can be checked out, each with its own report; its own summary, trend and artifact."""
    text = (ROOT / ".github" / "workflows" / "nightly-gpu-fuzz.yml").read_text()
    commands = _fuzz_commands(text)
    assert "python3 -m fuzz sources list --newest" in " ".join(commands)
    runs = {build_parser().parse_args(shlex.split(re.sub(r'"\$\(.*?\)"', "1", c))[3:]).report:
            build_parser().parse_args(shlex.split(re.sub(r'"\$\(.*?\)"', "1", c))[3:])
            for c in commands if c.startswith("python3 -m fuzz run ") and "--legacy" in c}
    assert set(runs) == {"today-release.json", "today-main.json"}
    assert runs["today-release.json"].legacy == "vllm==0.27.1"
    assert runs["today-release.json"].optimized == "${{ steps.newest.outputs.side }}"
    assert runs["today-main.json"].legacy == "vllm==0.27.1" and runs["today-main.json"].optimized == "vllm-main"
    (trend,) = [c for c in commands if c.startswith("python3 -m fuzz trend ") and "today-release" in c]
    args = build_parser().parse_args(shlex.split(trend)[3:])
    assert args.reports[-1] == "today-release.json" and args.markdown == "today-trend.md"
    assert 'cat today-release.md today-main.md >> "$GITHUB_STEP_SUMMARY"' in text
    assert "name: nightly-today" in text and "--name nightly-today" in text


def test_sources_list_newest_names_the_newest_shipped_release_as_a_side(capsys):
    from fuzz.cli import main
    from fuzz.releases.common import version_key

    assert main(["sources", "list", "--newest"]) == 0
    shipped = [p.name.removeprefix("vllm-") for p in (ROOT / "sources").glob("vllm-*")]
    assert capsys.readouterr().out == f"vllm=={max(shipped, key=version_key)}\n"
