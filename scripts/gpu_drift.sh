#!/usr/bin/env bash
# The drift runs of docs/findings/drift.md on the GPU host: vllm 0.28.0 against
# every later release, both contracts, rebuilt from the source packs in
# local-sources/ (python -m fuzz sources fetch ... --into local-sources; no
# network needed here). Writes $OUT/drift.log and $OUT/drift-summary.jsonl (one
# line per run: exit code, each target's verdict, cannot-build reasons, failures);
# the full reports stay in /tmp/drift-reports (few files come back from the host).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
REPORTS=/tmp/drift-reports; mkdir -p "$REPORTS"
N=${N:-100}; WORKERS=${WORKERS:-8}; RELEASES=${RELEASES:-"0.29.0 0.30.0 0.31.0 0.32.0 0.33.0"}
{
  python3 -m fuzz sources list --sources local-sources
  for release in $RELEASES; do
    for contract in caller wide; do
      start=$(date +%s)
      python3 -m fuzz run --device cuda --legacy vllm==0.28.0 --optimized "vllm==$release" \
        --sources local-sources --contract "$contract" --seed 0 --max-examples "$N" --workers "$WORKERS" \
        --corpus "/tmp/drift-$release-$contract" --report "$REPORTS/$release-$contract.json" --quiet \
        --confirm "${CONFIRM:-0}" > "$REPORTS/$release-$contract.log" 2>&1
      code=$?
      echo "== $release $contract: exit $code ($(( $(date +%s) - start )) s)"
      grep -E "^cannot-build|^[A-Z-]+ in |^seed" "$REPORTS/$release-$contract.log" | sort | uniq -c | head -30
      python3 scripts/drift_summary.py "$REPORTS/$release-$contract.json" "$release" "$contract" "$code" \
        >> "$OUT/drift-summary.jsonl"
    done
  done
} 2>&1 | tee "$OUT/drift.log"
