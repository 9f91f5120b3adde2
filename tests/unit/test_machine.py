"""The machine's use in the report (fuzz/reports/machine.py): NVML sampled without a GPU (a fake ``pynvml``),
examples/s per device, the sharing mode, and how Markdown, HTML, the notes and merge-reports show it."""

from __future__ import annotations

import json
import sys
import time
import types
import uuid

import pytest

from fuzz.config import RunConfig
from fuzz.records.model import DeviceTally, Report, TargetEntry
from fuzz.reports.formats import markdown
from fuzz.reports.html import html_report
from fuzz.reports.machine import NOT_INSTALLED, GpuSampler, machine_lines, machine_use, visible_indices
from fuzz.reports.merge import merge_reports
from fuzz.reports.report import report_notes
from fuzz.reports.scope import run_scope

MIB = 1 << 20


class FakeNvml(types.ModuleType):
    """pynvml's calls the sampler makes, over scripted readings: ``busy[i]`` / ``used_mib[i]`` are
    cycled per device; ``calls`` records init/shutdown."""

    def __init__(self, count: int = 2, busy: dict | None = None, used_mib: dict | None = None,
                 init_error: Exception | None = None) -> None:
        super().__init__("pynvml")
        self.count, self.init_error = count, init_error
        self.busy = busy or {i: [10.0, 30.0, 50.0] for i in range(count)}
        self.used_mib = used_mib or {i: [1000, 2000, 3000] for i in range(count)}
        self.reads = {i: 0 for i in range(count)}  # memory readings, the start's total included
        self.busy_reads = {i: 0 for i in range(count)}
        self.calls: list[str] = []

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200" if h == 0 else "NVIDIA H100"  # bytes, as nvidia-ml-py < 11.5 returns

    def nvmlDeviceGetUtilizationRates(self, h):
        series = self.busy[h]
        value = series[self.busy_reads[h] % len(series)]
        self.busy_reads[h] += 1
        return types.SimpleNamespace(gpu=value, memory=0)

    def nvmlDeviceGetMemoryInfo(self, h):
        series = self.used_mib[h]
        used = series[self.reads[h] % len(series)] * MIB
        self.reads[h] += 1
        return types.SimpleNamespace(used=used, total=143771 * MIB, free=0)


@pytest.fixture
def fake(monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return nvml


def _scripted(nvml: FakeNvml, every_s: float = 3600.0) -> dict:
    """Start (one sample), one more by hand, stop (the last): exactly three samples, no timing luck."""
    with GpuSampler(every_s=every_s) as sampler:
        sampler.sample()
    return sampler.summary()


# --------------------------------------------------------------------------- sampling


def test_summary_shape_and_numbers_from_scripted_samples(fake):
    fake.busy = {0: [10.0, 30.0, 80.0], 1: [0.0, 0.0, 0.0]}
    fake.used_mib = {0: [1000, 4000, 1000, 2000], 1: [5, 5, 5, 5]}  # first read: _describe's total
    summary = _scripted(fake)
    assert summary["every_s"] == 3600.0 and summary["samples"] == 3
    gpu0, gpu1 = summary["gpus"]
    assert gpu0 == {"index": 0, "name": "NVIDIA H200", "busy_pct": {"mean": 40.0, "p50": 30.0, "max": 80.0},
                    "memory_used_mib": {"mean": 2333, "max": 4000}, "memory_total_mib": 143771}
    assert gpu1["name"] == "NVIDIA H100" and gpu1["busy_pct"] == {"mean": 0.0, "p50": 0.0, "max": 0.0}
    assert fake.calls == ["init", "shutdown"]


def test_the_thread_samples_every_every_s_and_a_short_run_has_two(fake):
    deadline = time.monotonic() + 60  # a broken thread fails the test, it does not hang it
    with GpuSampler(every_s=0.001) as sampler:
        while sampler.summary()["samples"] < 5 and time.monotonic() < deadline:
            time.sleep(0.001)
    summary = sampler.summary()
    assert summary["samples"] >= 6  # the thread's, then the one at stop
    with GpuSampler(every_s=3600.0) as short:
        pass
    assert short.summary()["samples"] == 2
    short.stop()  # twice is harmless
    assert fake.calls.count("shutdown") == 2


def test_unavailable_when_pynvml_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with GpuSampler(every_s=0.001) as sampler:
        pass
    assert sampler.summary() == {"unavailable": NOT_INSTALLED}


def test_unavailable_when_nvml_init_fails(monkeypatch):
    nvml = FakeNvml(init_error=RuntimeError("NVML Shared Library Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with GpuSampler(every_s=0.001) as sampler:
        pass
    assert sampler.summary() == {"unavailable": "NVML could not start (NVML Shared Library Not Found)"}


def test_unavailable_when_there_is_no_device(monkeypatch):
    nvml = FakeNvml(count=0)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with GpuSampler() as sampler:
        pass
    assert sampler.summary() == {"unavailable": "NVML sees no GPU"}
    assert nvml.calls == ["init", "shutdown"]


def test_a_reading_that_fails_is_skipped_not_raised(fake):
    def broken(h):
        raise RuntimeError("GPU is lost")

    with GpuSampler(every_s=3600.0) as sampler:
        fake.nvmlDeviceGetUtilizationRates = broken
    gpu0 = sampler.summary()["gpus"][0]
    assert gpu0["busy_pct"]["max"] == 10.0  # the start's reading only


@pytest.mark.parametrize("env, expected", [(None, [0, 1, 2, 3]), ("2", [2]), ("3,1", [3, 1]), ("1,9", [1]),
                                           ("GPU-8c1f5e", [0, 1, 2, 3]), ("", [0, 1, 2, 3]), ("-1", [])])
def test_cuda_visible_devices_picks_the_physical_indices(monkeypatch, env, expected):
    if env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert visible_indices(4) == expected


def test_the_sampler_reads_only_the_visible_gpus(fake, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    summary = _scripted(fake)
    assert [g["index"] for g in summary["gpus"]] == [1]
    assert fake.busy_reads[0] == 0 and fake.reads[0] == 0


# --------------------------------------------------------------------------- machine_use, machine_lines


def _entry(name: str, **examples: int) -> TargetEntry:
    return TargetEntry(name=name, devices=tuple(examples), by_device={
        d: DeviceTally(examples=n, verdicts={"agree": n}) for d, n in examples.items()})


GPU = {"every_s": 1.0, "samples": 150, "gpus": [
    {"index": 0, "name": "NVIDIA H200", "busy_pct": {"mean": 36.4, "p50": 35.0, "max": 71.0},
     "memory_used_mib": {"mean": 9000, "max": 12345}, "memory_total_mib": 143771}]}
SHARING = {"asked": "auto", "mode": "mps", "daemon": "started", "note": None, "victims_replayed": 0}


def test_machine_use_adds_examples_per_device_and_their_rates():
    machine = machine_use([_entry("a", cpu=1000, cuda=5000), _entry("b", cpu=234, cuda=678)], 150.0, GPU, SHARING)
    assert machine == {"seconds": 150.0, "examples": {"cpu": 1234, "cuda": 5678},
                       "examples_per_s": {"cpu": 8.23, "cuda": 37.85}, "gpu_share": SHARING, "gpu": GPU}


@pytest.mark.parametrize("seconds", [0, 0.0, None])
def test_machine_use_without_seconds_gives_no_rates(seconds):
    machine = machine_use([_entry("a", cpu=10)], seconds, None, None)
    assert machine["examples"] == {"cpu": 10} and machine["examples_per_s"] == {}
    assert machine["gpu"] == {} and machine["gpu_share"] == {}


def test_machine_lines_say_rates_gpu_and_sharing():
    machine = machine_use([_entry("a", cpu=1234, cuda=5678)], 150.0, GPU, SHARING)
    assert machine_lines(machine) == [
        "machine: 1,234 cpu + 5,678 cuda examples in 150 s (8.2 + 37.9 /s); GPU 0 (NVIDIA H200) busy 36% mean, "
        "71% max, memory 12,345 MiB max of 143,771; sharing: mps (daemon started by this run)"]


def test_machine_lines_say_the_note_victims_and_unavailable_sampling():
    sharing = {"asked": "mps", "mode": "time-sliced", "daemon": "existing", "note": "MPS pipe not writable",
               "victims_replayed": 2}
    machine = machine_use([_entry("a", cuda=10)], 0, {"unavailable": NOT_INSTALLED}, sharing)
    (line,) = machine_lines(machine)
    assert line == (f"machine: 10 cuda examples; GPU use not sampled: {NOT_INSTALLED}; sharing: time-sliced "
                    "(asked mps, an existing daemon, 2 victims replayed): MPS pipe not writable")


def test_machine_lines_of_nothing_is_nothing():
    assert machine_lines({}) == []


# --------------------------------------------------------------------------- renderers, merge


def _report(machine: dict | None = None, **run) -> Report:
    return Report((_entry("t", cpu=1234, cuda=5678),), run={**run, **({"machine": machine} if machine else {})})


def test_markdown_has_a_machine_section_only_when_the_run_recorded_one():
    machine = machine_use(_report().targets, 150.0, GPU, SHARING)
    text = markdown(_report(machine))
    assert "### Machine" in text
    assert "| cuda | 5,678 | 37.9 |" in text and "| cpu | 1,234 | 8.2 |" in text
    assert "| 0 | NVIDIA H200 | 36% | 71% | 12,345 | 143,771 |" in text
    assert "sharing: mps (daemon started by this run)" in text
    assert "- machine: 1,234 cpu" in text  # the notes' line too
    old = markdown(_report())
    assert "Machine" not in old and "machine:" not in old


def test_markdown_says_why_the_gpu_was_not_sampled():
    text = markdown(_report(machine_use(_report().targets, 2.0, {"unavailable": NOT_INSTALLED}, None)))
    assert f"GPU use not sampled: {NOT_INSTALLED}" in text


def test_report_notes_and_html_show_the_machine_escaped():
    sharing = {**SHARING, "note": "<pipe> & co"}
    report = _report(machine_use(_report().targets, 150.0, GPU, sharing))
    assert any(note.startswith("machine: 1,234 cpu") for note in report_notes(report))
    page = html_report(report)
    assert "Use during the run" in page and "&lt;pipe&gt; &amp; co" in page and "<pipe>" not in page
    assert "<td>NVIDIA H200</td>" in page
    assert "Use during the run" not in html_report(_report())
    assert not any(note.startswith("machine") for note in report_notes(_report()))


def _scoped(config: RunConfig, shard: tuple[int, int]) -> dict:
    identities = {s: {"kind": "copy", "code_sha256": "c0de"} for s in ("legacy", "optimized")}
    config = config.replace(run_id=uuid.uuid4().hex)
    return {**config.to_json(), "scope": run_scope(config, identities, shard)}


def test_merge_keeps_each_inputs_machine_and_claims_none_for_all():
    plan = RunConfig(targets=("t",), seed=3, max_examples=40, pieces=4)
    entry = TargetEntry(name="t", devices=("cpu",), by_device={"cpu": DeviceTally(examples=5, verdicts={"agree": 5})})
    one = machine_use([entry], 10.0, {"unavailable": NOT_INSTALLED}, None)
    two = machine_use([entry], 50.0, GPU, SHARING)
    merged = merge_reports([
        ("host1.json", Report((entry,), run={**_scoped(plan.replace(shard="1/2"), (1, 2)), "machine": one})),
        ("host2.json", Report((entry,), run={**_scoped(plan.replace(shard="2/2"), (2, 2)), "machine": two}))])
    assert "machine" not in merged.run
    assert merged.run["machines"] == [{"name": "host1.json", **one}, {"name": "host2.json", **two}]
    notes = [n for n in report_notes(merged) if n.startswith("machine")]
    assert notes[0].startswith("machine (host1.json): 5 cpu examples in 10 s (0.5 /s)")
    assert notes[1].startswith("machine (host2.json): 5 cpu examples in 50 s (0.1 /s); GPU 0")
    text = markdown(merged)
    assert "### Machines" in text and "#### host1.json" in text and "#### host2.json" in text
    again = merge_reports([("merged.json", merged)])  # a merge of merges keeps the list, names and all
    assert again.run["machines"] == merged.run["machines"]


def test_a_run_records_the_machine_it_used(tmp_path):
    """The whole path: a CPU run's report says how many examples per device, at what rate, and that there
    was no GPU to share (no NVML sampling without CUDA examples)."""
    from fuzz.config import RunConfig
    from fuzz.run.session import run

    report = tmp_path / "r.json"
    config = RunConfig(targets=("fla-chunk-offsets",), devices=("cpu",), max_examples=7, seed=1, isolated=False,
                       confirm=0, corpus=str(tmp_path / "c"), gpu_share="mps")
    assert run(config, outputs={"report": report}).exit_code == 0
    machine = json.loads(report.read_text())["run"]["machine"]
    assert machine["examples"] == {"cpu": 7} and machine["examples_per_s"]["cpu"] > 0 and machine["seconds"] >= 0
    assert machine["gpu_share"]["mode"] == "none" and machine["gpu_share"]["asked"] == "mps"
    assert machine["gpu"] == {}
