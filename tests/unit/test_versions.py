"""fuzz.versions: what reports and repro files record of the software, read without importing torch in a
run's parent process (it imports torch only to run examples, which its children do)."""

from __future__ import annotations

import subprocess
import sys

import torch

from fuzz.versions import versions
from tests.support import ROOT


def test_torch_and_its_cuda_are_what_torch_itself_says():
    recorded = versions()
    assert recorded["torch"] == torch.__version__
    assert recorded["torch_cuda"] == torch.version.cuda
    assert recorded["gpu"] == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)


def test_a_clean_cpu_runs_parent_and_a_replays_parent_never_import_torch():
    """2 s of CPU per command otherwise (lab/cpu-runs/2026-12-06e-cpu.md): versions(), the confirmation step
    of a run with nothing to confirm, and the replay command's own modules stay torch-free."""
    probe = ("import sys; from fuzz.versions import versions; v = versions(); "
             "from fuzz.run.triage import confirm; confirm([], runs=2); "
             "import fuzz.run.replay, fuzz.commands.replay_cmd, fuzz.engine.repro; "
             "print(v['torch'], 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [torch.__version__, "False"]
