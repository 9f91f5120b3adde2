"""``selftest``: the fuzzer's power by mutation, as a command (the engine's part is fuzz/run/selftest.py)."""

from __future__ import annotations

from typing import Sequence

from fuzz.config import RunConfig
from fuzz.records.model import EXIT_FAILURE, EXIT_OK
from fuzz.reports.preflight import check_no_collisions, check_output, check_overwrite


def _to_kill(examples: dict | None) -> str:
    return "-" if examples is None else f"{examples['median']:g}/{examples['max']}"


def _per_definition(definitions: dict[str, dict[str, int]]) -> str:
    """``UvaBufferPool.copy_to_uva 0, UvaBufferPool._next_buf 14 (9 killed, 3 equiv., 2 survived)``."""
    parts = []
    for name, row in definitions.items():
        counts = ", ".join(f"{row[kind]} {label}" for kind, label in
                           (("killed", "killed"), ("equivalent", "equiv."), ("survived", "survived")) if row[kind])
        parts.append(f"{name} {row['mutants']}" + (f" ({counts})" if counts else ""))
    return "; ".join(parts)


def selftest(targets: Sequence[str] = (), *, device: str = "auto", seed: int = 0, max_examples: int = 200,
             contract: str = "caller", limit: int | None = None, shared: bool = False, json: str | None = None,
             min_kill_rate: float | None = None) -> int:
    """``selftest``: every mutant of each target's optimized copy fuzzed; the kill-rate table, ``json`` written
    where asked. Exit 1 when a kill rate is below ``min_kill_rate``, else 0."""
    from fuzz.engine.devices import resolve_devices
    from fuzz.reports.outputs import write_json
    from fuzz.run.selftest import load_equivalents, selftest_target
    from fuzz.targets import lookup

    chosen = lookup(list(targets))
    json_out = check_output("--json", json) if json is not None else None
    if json_out is not None:
        from fuzz.run.selftest import EQUIVALENT_FILE

        check_overwrite("--json", json_out, "selftest")
        check_no_collisions({"--json": json_out}, {"the equivalents list": EQUIVALENT_FILE})
    options = RunConfig(devices=resolve_devices(device), seed=seed, max_examples=max_examples,
                        contract=contract, isolated=False)
    equivalents = load_equivalents()
    results = []
    if shared:
        print("each mutant replaces both copies: only the targets' invariants and references can kill it")
    print(f"{'target':34} {'mutants':>7} {'killed':>6} {'equiv.':>6} {'survived':>8} {'kill rate':>9} "
          f"{'examples to kill (median/max)':>29}  killed by")
    for target in chosen:
        result = selftest_target(target, options, equivalents, limit, shared=shared)
        results.append(result)
        by = ", ".join(f"{oracle} {n}" for oracle, n in result["killed_by"].items()) or "-"
        rate = "n/a" if result["kill_rate"] is None else f"{result['kill_rate']:.1%}"
        print(f"{target.name:34} {result['mutants']:7} {result['killed']:6} {len(result['equivalent']):6} "
              f"{len(result['survived']):8} {rate:>9} {_to_kill(result['examples_to_kill']):>29}"
              f"  {by}", flush=True)
        if result["baseline"]:
            print(f"    NOT MEASURED: the unmutated copies already fail ({result['baseline']}): every mutant would "
                  "count as killed; self-test an input model beside the finding (docs/selftest.md)")
        if len(result["definitions"]) > 1:  # the entry and the helpers the record claims (docs/selftest.md)
            print(f"    per definition: {_per_definition(result['definitions'])}")
        for survivor in result["survived"]:
            print(f"    survived {survivor['mutant']} in {survivor['definition']}: {survivor['code']}")
    if json_out:
        write_json(json_out, {"devices": list(options.devices), "max_examples": max_examples,
                              "shared": shared, "results": results})
    # A rate not measured does not meet a bar either.
    low = [r for r in results
           if min_kill_rate is not None and (r["kill_rate"] is None or r["kill_rate"] < min_kill_rate)]
    for result in low:
        rate = "not measured" if result["kill_rate"] is None else f"{result['kill_rate']:.1%}"
        print(f"KILL RATE BELOW {min_kill_rate:g}: {result['target']} {rate}")
    return EXIT_FAILURE if low else EXIT_OK
