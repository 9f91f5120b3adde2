"""The machine's use during a run: examples per second per device, GPU busy % and memory, the sharing mode.

A night's report says what was found; this says what the hardware did meanwhile, so a slow run can be told
from a starved one (a GPU 5 % busy is waiting on the CPU side, not fuzzing) and a shared GPU from an own one.
``GpuSampler`` reads NVML (package nvidia-ml-py, module ``pynvml``; the ``gpu`` extra) in a daemon thread;
``machine_use`` puts its summary beside the examples' rates as the report's ``run["machine"]``;
``machine_lines`` says it in words for the terminal, Markdown and HTML (fuzz/reports/report.py, fuzz/reports/formats.py,
fuzz/reports/html.py).

Measuring must never cost the run: every NVML failure (not installed, no driver, no device, a device lost
mid-run) becomes ``{"unavailable": reason}`` or a skipped sample, never an exception. No torch here: the
renderers use ``machine_lines`` where no GPU stack is installed.
"""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Iterable, Mapping
from types import ModuleType, TracebackType
from typing import Any

from fuzz.records.model import TargetEntry

MIB = 1 << 20
NOT_INSTALLED = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"


def visible_indices(count: int, env: str | None = None) -> list[int]:
    """The NVML indices this run's CUDA may use: ``CUDA_VISIBLE_DEVICES``'s when it lists integers
    (so a run given GPU 3 of 8 reports GPU 3, not the neighbours' work), every device otherwise (unset,
    UUIDs, MIG names). NVML counts in PCI bus order; CUDA does too under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
    which is how shared hosts pin GPUs."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES") if env is None else env
    if value is not None:
        try:
            wanted = [int(part) for part in value.split(",") if part.strip()]
        except ValueError:
            wanted = []
        if wanted:
            return [i for i in dict.fromkeys(wanted) if 0 <= i < count]
    return list(range(count))


class GpuSampler:
    """Samples each visible GPU's busy % and memory every ``every_s`` seconds while a run fuzzes.

    ``with GpuSampler(every_s=1.0) as sampler: ...`` then ``sampler.summary()``. One sample is taken at
    start and one at stop, so even a run shorter than ``every_s`` has two."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self._nvml: ModuleType | None = None
        self._unavailable: str | None = None
        self._gpus: list[dict[str, Any]] = []  # index, name, memory_total_mib, handle
        self._busy: dict[int, list[float]] = {}
        self._used: dict[int, list[float]] = {}
        self._samples = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Open NVML, find the devices, take the first sample and start the thread; on any failure, record
        why and sample nothing (the run goes on unmeasured)."""
        if self._thread is not None or self._unavailable is not None:
            return
        self._unavailable = self._open()
        if self._unavailable is not None:
            return
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="syncfuzz-gpu-sampler", daemon=True)
        self._thread.start()

    def _open(self) -> str | None:
        """NVML initialised and the visible devices found, or why not."""
        try:
            import pynvml
        except ImportError:
            return NOT_INSTALLED
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 -- NVMLError and friends: no driver is a reason, not a crash
            return f"NVML could not start ({_short(exc)})"
        self._nvml = pynvml
        try:
            self._gpus = [self._describe(i) for i in visible_indices(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # noqa: BLE001 -- a device NVML lists but cannot open: reported, not raised
            self._shutdown()
            return f"NVML could not read the devices ({_short(exc)})"
        if not self._gpus:
            self._shutdown()
            return "NVML sees no GPU" + (f" of CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}"
                                         if os.environ.get("CUDA_VISIBLE_DEVICES") is not None else "")
        return None

    def _describe(self, index: int) -> dict[str, Any]:
        """What does not change during a run, read once: the name and memory size."""
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        if isinstance(name, bytes):  # nvidia-ml-py before 11.5 returned bytes
            name = name.decode(errors="replace")
        total = nvml.nvmlDeviceGetMemoryInfo(handle).total / MIB
        self._busy[index], self._used[index] = [], []
        return {"index": index, "name": str(name), "memory_total_mib": round(total), "handle": handle}

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        """One reading of every device; a device that fails this once is skipped this once."""
        if self._nvml is None:
            return
        with self._lock:
            for gpu in self._gpus:
                try:
                    busy = self._nvml.nvmlDeviceGetUtilizationRates(gpu["handle"]).gpu
                    used = self._nvml.nvmlDeviceGetMemoryInfo(gpu["handle"]).used / MIB
                except Exception:  # noqa: BLE001 -- a lost reading must not stop the run's fuzzing
                    continue
                self._busy[gpu["index"]].append(float(busy))
                self._used[gpu["index"]].append(float(used))
            self._samples += 1

    def stop(self) -> None:
        """Join the thread, take the last sample and close NVML; safe to call twice."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()
        self._shutdown()

    def _shutdown(self) -> None:
        if self._nvml is None:
            return
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 -- closing is best effort; the samples are already taken
            pass
        self._nvml = None

    def summary(self) -> dict[str, Any]:
        """``{"every_s", "samples", "gpus": [{index, name, busy_pct {mean, p50, max}, memory_used_mib {mean,
        max}, memory_total_mib}]}``, or ``{"unavailable": reason}`` when nothing could be measured."""
        if self._unavailable is not None:
            return {"unavailable": self._unavailable}
        with self._lock:
            if not self._samples:
                return {"unavailable": "no GPU sample was taken (the sampler never started)"}
            gpus = [_gpu_summary(gpu, self._busy[gpu["index"]], self._used[gpu["index"]]) for gpu in self._gpus]
            return {"every_s": self.every_s, "samples": self._samples, "gpus": gpus}


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:160]


def _gpu_summary(gpu: Mapping[str, Any], busy: list[float], used: list[float]) -> dict[str, Any]:
    """One device's readings as the report keeps them: busy to 0.1 %, memory to the MiB."""
    return {"index": gpu["index"], "name": gpu["name"],
            "busy_pct": {"mean": round(statistics.fmean(busy), 1) if busy else None,
                         "p50": round(statistics.median(busy), 1) if busy else None,
                         "max": round(max(busy), 1) if busy else None},
            "memory_used_mib": {"mean": round(statistics.fmean(used)) if used else None,
                                "max": round(max(used)) if used else None},
            "memory_total_mib": gpu["memory_total_mib"]}


def machine_use(entries: Iterable[TargetEntry], seconds: float | None, gpu: Mapping[str, Any] | None,
                sharing: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report's ``run["machine"]``: examples and examples/s per device over the fuzzing phase's wall
    ``seconds`` (no rates when it is 0 or unknown), with the sampler's summary and the GPU sharing mode."""
    examples: dict[str, int] = {}
    for entry in entries:
        for device, tally in entry.by_device.items():
            examples[device] = examples.get(device, 0) + tally.examples
    rates = {device: round(n / seconds, 2) for device, n in examples.items()} if seconds else {}
    return {"seconds": round(seconds, 1) if seconds else seconds, "examples": examples, "examples_per_s": rates,
            "gpu_share": dict(sharing or {}), "gpu": dict(gpu or {})}


def _examples_clause(machine: Mapping[str, Any]) -> str:
    examples = machine.get("examples") or {}
    rates = machine.get("examples_per_s") or {}
    seconds = machine.get("seconds")
    counts = " + ".join(f"{n:,} {device}" for device, n in examples.items()) or "0"
    text = f"{counts} examples"
    if seconds:
        text += f" in {seconds:,.0f} s"
    if rates:
        text += " (" + " + ".join(f"{rates.get(device, 0):,.1f}" for device in examples) + " /s)"
    return text


def _number(value: Any, unit: str = "") -> str:
    return "?" if value is None else f"{value:,.0f}{unit}"


def gpu_clauses(gpu: Mapping[str, Any]) -> list[str]:
    """One clause per sampled GPU, or the one reason none was sampled."""
    if not gpu:
        return []
    if gpu.get("unavailable"):
        return [f"GPU use not sampled: {gpu['unavailable']}"]
    out = []
    for card in gpu.get("gpus") or []:
        busy, memory = card.get("busy_pct") or {}, card.get("memory_used_mib") or {}
        out.append(f"GPU {card.get('index')} ({card.get('name')}) busy {_number(busy.get('mean'), '%')} mean, "
                   f"{_number(busy.get('max'), '%')} max, memory {_number(memory.get('max'))} MiB max of "
                   f"{_number(card.get('memory_total_mib'))}")
    return out


def sharing_clause(sharing: Mapping[str, Any]) -> str | None:
    """How the GPU was shared: the mode, who started an MPS daemon, victims replayed, the note."""
    if not sharing or not sharing.get("mode"):
        return None
    details = []
    asked = sharing.get("asked")
    if asked and asked not in ("auto", sharing["mode"]):
        details.append(f"asked {asked}")
    daemon = sharing.get("daemon")
    if daemon == "started":
        details.append("daemon started by this run")
    elif daemon == "existing":
        details.append("an existing daemon")
    elif daemon:
        details.append(f"daemon {daemon}")
    victims = sharing.get("victims_replayed") or 0
    if victims > 0:
        details.append(f"{victims} victim{'s' if victims != 1 else ''} replayed")
    text = f"sharing: {sharing['mode']}" + (f" ({', '.join(details)})" if details else "")
    return text + (f": {sharing['note']}" if sharing.get("note") else "")


def machine_lines(machine: Mapping[str, Any]) -> list[str]:
    """The machine's use in words (one line; empty for a report without it). An entry of a merged
    report's ``run["machines"]`` carries its input's ``name``, which the line names."""
    if not machine:
        return []
    clauses = [_examples_clause(machine), *gpu_clauses(machine.get("gpu") or {})]
    sharing = sharing_clause(machine.get("gpu_share") or {})
    if sharing:
        clauses.append(sharing)
    label = f"machine ({machine['name']})" if machine.get("name") else "machine"
    return [f"{label}: " + "; ".join(clauses)]


def report_machines(run: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The machine sections a report's ``run`` holds: its own, or a merged report's one per input."""
    machines = run.get("machines")
    if isinstance(machines, list):
        return [m for m in machines if isinstance(m, Mapping) and m]
    machine = run.get("machine")
    return [machine] if isinstance(machine, Mapping) and machine else []
