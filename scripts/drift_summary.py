"""One JSON line summarizing a drift run's report (scripts/gpu_drift.sh)."""

from __future__ import annotations

import json
import sys


def summary(path: str, release: str, contract: str, code: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        return {"release": release, "contract": contract, "exit": int(code), "error": str(exc)}
    targets = {}
    for entry in report["targets"]:
        failures = [{"verdict": f["verdict"], "device": f["device"], "input": f["input"],
                     "first_mismatch": (f["mismatches"] or [{}])[0]} for f in entry["failures"]]
        targets[entry["name"]] = {"verdict": entry["verdict"], "examples": entry["examples"],
                                  "cannot_build": entry.get("cannot_build"), "failures": failures[:3],
                                  "distinct_failures": len(failures),
                                  "syncs": {d: t["syncs_per_call"] for d, t in entry["by_device"].items()}}
    return {"release": release, "contract": contract, "exit": int(code), "versions": report["versions"],
            "sides": {role: {k: v for k, v in side.items() if k != "files"}
                      for role, side in report["run"].get("sides", {}).items()},
            "targets": targets}


if __name__ == "__main__":
    print(json.dumps(summary(*sys.argv[1:5])))
