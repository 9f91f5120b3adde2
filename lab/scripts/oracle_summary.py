"""Compact summaries of an oracle run (lab/scripts/gpu_oracle_findings.sh): few files come back from the GPU host.

``report REPORT.json LABEL``: one JSON line per run: per target its verdict, examples, the failures (verdict,
first mismatch, input, the oracles that flagged it) and per device the function's and the consumer's syncs
per call, legacy and optimized.
``selftest FILE.json...``: one JSON line: per target the mutants, kills, kill rate and ``killed_by``.
"""

from __future__ import annotations

import json
import sys


def report(path: str, label: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        return {"label": label, "error": str(exc)}
    targets = {}
    for entry in data["targets"]:
        targets[entry["name"]] = {
            "verdict": entry["verdict"], "examples": entry["examples"],
            "failures": [{"verdict": f["verdict"], "device": f["device"], "known": f["known"],
                          "oracles": f.get("oracles"), "first_mismatch": (f["mismatches"] or [{}])[0],
                          "input": f["input"]} for f in entry["failures"]][:4],
            "syncs": {d: t["syncs_per_call"] for d, t in entry["by_device"].items()},
            "consumer_syncs": {d: t.get("consumer_syncs_per_call") for d, t in entry["by_device"].items()},
        }
    return {"label": label, "exit": data["exit_code"], "versions": data["versions"], "targets": targets}


def selftest(paths: list[str]) -> dict:
    out = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, json.JSONDecodeError) as exc:
            out[path] = {"error": str(exc)}
            continue
        for result in data["results"]:
            out[result["target"]] = {k: result[k] for k in ("shared", "mutants", "killed", "kill_rate",
                                                            "killed_by", "examples_to_kill")}
            out[result["target"]]["survived"] = len(result["survived"])
    return out


if __name__ == "__main__":
    if sys.argv[1] == "report":
        print(json.dumps(report(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(selftest(sys.argv[2:])))
