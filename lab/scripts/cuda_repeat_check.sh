#!/usr/bin/env bash
# Does one seed repeat on CUDA? The two targets whose both-raised counts differed between two H200 runs of
# one seed (lab/gpu-runs/2026-12-02-verdicts-h200.md), fuzzed three times on CUDA with seed 0; prints each
# run's tallies (examples, both-raised, verdicts, syncs per call) to $OUT/det.log.
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
for i in 1 2 3; do
  python3 -m fuzz run --device cuda --seed 0 --max-examples 100 --target fla-chunk-indices \
    --target keep-on-cpu-keye-grid-thw --corpus "/tmp/det-$i" --report "/tmp/det-$i.json" --quiet --confirm 0 \
    > /dev/null 2>&1
  python3 - "/tmp/det-$i.json" <<'PY'
import json, sys
for entry in json.load(open(sys.argv[1]))["targets"]:
    tally = entry["by_device"]["cuda"]
    print(sys.argv[1], entry["name"], "examples", tally["examples"], "both_raised", tally["both_raised"],
          "verdicts", tally["verdicts"], "syncs", json.dumps(tally["syncs_per_call"], sort_keys=True))
PY
done 2>&1 | tee "$OUT/det.log"
