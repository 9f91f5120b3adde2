"""Saved failures: self-contained JSON repro files, never pickle.

A repro holds the target name (and the module that registered it, for targets
outside the catalog), the input *spec* Hypothesis shrank to, the whole
``RunConfig`` of the run that found it (``config``: contract, stress,
upstream, watchdog, ...; replay and ``--confirm`` rebuild exactly that run for
this one input), the device, the verdict, where the outputs differ, a summary
of both outputs and the versions of everything involved. The spec is plain
JSON, so replay rebuilds the exact tensors without unpickling anything.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fuzz.config import ConfigError, RunConfig
from fuzz.errors import ReproFileError
from fuzz.oracles.outcome import SideResult
from fuzz.records.verdicts import EXAMPLE_VERDICTS
from fuzz.releases import side_identities, side_labels
from fuzz.reports.outputs import write_json
from fuzz.targets import CONTRACTS, TARGET_MODULES_ENV, Target, all_targets, catalog_targets, plugin_modules
from fuzz.versions import target_versions, versions

if TYPE_CHECKING:  # torch-free at import: a replay's parent never runs an example (its child does)
    from fuzz.engine.execute import ExampleResult

REPRO_FORMAT = "syncfuzz-repro/1"
_PICKLE_MAGIC = (b"\x80", b"(dp", b"(lp", b"}q", b"]q", b"PK\x03\x04")
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "target": str,
    "input": dict,
    "device": str,
    "contract": str,
    "verdict": str,
}


def summarize(value: Any, limit: int = 16) -> Any:
    """A JSON-able picture of an output: enough to read, never the whole tensor."""
    torch = sys.modules.get("torch")  # an output holds a tensor only where torch is loaded
    if torch is not None and isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1)[:limit].cpu()
        if flat.dtype in (torch.bfloat16, torch.float16):
            flat = flat.float()
        return {
            "tensor": {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                       "device": str(value.device), "first_values": flat.tolist()}
        }
    if isinstance(value, (list, tuple)):
        return [summarize(v, limit) for v in value[:limit]]
    if isinstance(value, dict):
        return {str(k): summarize(v, limit) for k, v in list(value.items())[:limit]}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)[:200]


def side_summary(side: SideResult) -> dict:
    out: dict[str, Any] = {"syncs": side.syncs, "allowed_syncs": side.allowed_syncs,
                           "hidden_syncs": side.hidden_syncs}
    if side.policy:
        out["copy_policy"] = list(side.policy)
    if side.raised:
        out["raised"] = {"type": side.raised.type_name, "message": side.raised.message}
    else:
        out["value"] = summarize(side.value)
    return out


def registering_module(name: str, modules: tuple[str, ...]) -> str | None:
    """The plug-in module (of ``modules``) that registers target ``name``; None for the catalog's."""
    if any(t.name == name for t in catalog_targets()):
        return None
    return next((m for m in modules if name in all_targets([m])), None)


def repro_payload(target: Target, result: ExampleResult, config: RunConfig, flaky: bool = False) -> dict:
    """A repro file's content. ``config`` is the run's (per item: its seed and share)."""
    return {
        "format": REPRO_FORMAT,
        "target": target.name,
        "target_module": registering_module(target.name, config.target_modules),
        "upstream": list(target.upstream),
        "legacy": target.legacy,
        "optimized": target.optimized,
        "input": result.spec,
        "config": config.to_json(),
        # Also at the top for people reading the file (replay reads "config").
        "seed": config.seed,
        "contract": config.contract,
        "stress": config.stress,
        "device": result.device,
        "verdict": result.verdict.value,
        "signature": result.signature,
        "flaky": flaky,
        "mismatches": [m.as_json() for m in result.mismatches],
        "outputs": {"legacy": side_summary(result.legacy), "optimized": side_summary(result.optimized)},
        # The copies' releases are this target's own pair (Target.versions); a side from a source says so.
        "versions": {**versions(), **target_versions(target), **side_labels(config)},
        "sides": side_identities(config),  # what each role ran: replay refuses a changed source
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def save_repro(directory: Path, payload: dict) -> Path:
    """Write atomically under a content-derived name; never overwrite."""
    directory.mkdir(parents=True, exist_ok=True)
    # One file per failure (model.failure_signature) and input.
    key = json.dumps([payload["target"], payload["input"], payload["signature"]], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    path = directory / f"{payload['target']}-{payload['verdict']}-{digest}.json"
    if path.exists():
        return path  # the same failure, already saved
    write_json(path, payload)  # atomic: a reader sees the whole file or none
    return path


def load_repro(path: str | os.PathLike) -> dict:
    """Read and validate a repro file; every problem is one ReproFileError line."""
    file = Path(path)
    if not file.is_file():
        raise ReproFileError(f"repro file {str(file)!r} does not exist; pass a path from the corpus failures/ folder")
    raw = file.read_bytes()
    if raw.startswith(_PICKLE_MAGIC):
        raise ReproFileError(
            f"{str(file)!r} looks like a pickle or archive; repro files are JSON (syncfuzz never loads pickles)"
        )
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReproFileError(f"{str(file)!r} is not valid JSON ({exc}); was it truncated? "
                             "re-run the fuzzer to save it again") from None
    if not isinstance(payload, dict):
        raise ReproFileError(f"{str(file)!r} holds JSON {type(payload).__name__}, "
                             f"expected an object with 'format': {REPRO_FORMAT!r}")
    if payload.get("format") != REPRO_FORMAT:
        raise ReproFileError(f"{str(file)!r} has format {payload.get('format')!r}, expected {REPRO_FORMAT!r}")
    for key, kind in _REQUIRED.items():
        if not isinstance(payload.get(key), kind):
            raise ReproFileError(f"{str(file)!r}: field {key!r} is missing or not a {getattr(kind, '__name__', kind)}")
    if not isinstance(payload["input"].get("device"), str):
        raise ReproFileError(f"{str(file)!r}: field 'input' has no 'device' string")
    _check_devices(payload, str(file))
    if payload["contract"] not in CONTRACTS:
        raise ReproFileError(f"{str(file)!r}: contract {payload['contract']!r} is not one of {', '.join(CONTRACTS)}")
    if payload["verdict"] not in EXAMPLE_VERDICTS:
        raise ReproFileError(f"{str(file)!r}: verdict {payload['verdict']!r} is not one of "
                             f"{', '.join(sorted(EXAMPLE_VERDICTS))}")
    module = payload.get("target_module")
    if module is not None and not isinstance(module, str):
        raise ReproFileError(f"{str(file)!r}: field 'target_module' must be a string or null")
    repro_config(payload, str(file))  # a bad config is the file's problem, found before anything runs
    return payload


REPRO_DEVICES = ("cpu", "cuda")  # what a run draws (fuzz.engine.devices); "auto" is resolved before saving


def _check_devices(payload: dict, name: str) -> None:
    """The saved device is one a run draws, at the top and in the input alike:
    another ("tpu") would be replayed on whatever the input builder defaults to."""
    for where, device in (("device", payload["device"]), ("input.device", payload["input"]["device"])):
        if device not in REPRO_DEVICES:
            raise ReproFileError(f"{name!r}: {where} {device!r} is not one of {', '.join(REPRO_DEVICES)}; "
                                 "the file was edited or written by another tool: re-run the fuzzer to save it")
    if payload["device"] != payload["input"]["device"]:
        raise ReproFileError(f"{name!r}: device {payload['device']!r} and input.device "
                             f"{payload['input']['device']!r} disagree; re-run the fuzzer to save it again")


def repro_config(payload: dict, source: str = "repro file") -> RunConfig:
    """The run that saved this failure. Files from before configs travelled
    whole carry only their contract, stress flag, seed and watchdog."""
    if "config" in payload:
        try:
            return RunConfig.from_json(payload["config"], f"{source!r}: field 'config'")
        except ConfigError as exc:
            raise ReproFileError(str(exc)) from None
    module = payload.get("target_module")
    timeout = payload.get("example_timeout")
    return RunConfig(contract=payload["contract"], stress=bool(payload.get("stress")),
                     seed=payload["seed"] if isinstance(payload.get("seed"), int) else 0,
                     target_modules=(module,) if module else (),
                     example_timeout=float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else 120.0)


def trusted_modules(payload: dict, config: RunConfig, source: str) -> list[str]:
    """The plug-in modules a replay may import: those the file names, if this
    environment trusts them (``SYNCFUZZ_TARGET_MODULES``). A repro file is
    data: a module it names is never imported on its word alone."""
    named = list(config.target_modules)
    if payload.get("target_module") and payload["target_module"] not in named:
        named.append(payload["target_module"])
    trusted = set(plugin_modules())
    needed = payload.get("target_module")
    if needed and needed not in trusted:
        raise ReproFileError(f"repro file {source!r} needs target module {needed!r}, which this environment does not "
                             f"trust; if it is yours, run with {TARGET_MODULES_ENV}={needed}")
    return [m for m in named if m in trusted]


def unbuildable(target: Target, spec: dict) -> str | None:
    """Why the target's input model cannot build inputs from ``spec`` (None: it can).

    A saved spec was drawn by the input model, so one that it cannot build was
    edited or written by another version: the file's problem, not a fuzzer bug.
    """
    model = target.input_model()
    for side in ("legacy", "optimized"):
        try:
            model.materialize(copy.deepcopy(spec), target.impl(side), side)
        except Exception as exc:  # noqa: BLE001 -- any failure to build is the reason
            return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return None
