#!/usr/bin/env bash
# Issue #16's measurements on the GPU host: every target on CUDA under both contracts with the known-issues
# file (invariants, references, consumer syncs), then `selftest --shared` (each mutant planted in both copies:
# what the invariants and references alone kill), one process per target in parallel.
# Writes compact summaries to $OUT: oracles.jsonl, selftest-shared.json, oracles.log.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
N=${N:-200}; SEED=${SEED:-20261201}; PARALLEL=${PARALLEL:-14}; DEVICE=${DEVICE:-cuda}
SELFTEST_DEVICE=${SELFTEST_DEVICE:-cpu}; SELFTEST_N=${SELFTEST_N:-60}
tmp=$(mktemp -d)
{
  for contract in ${CONTRACTS:-caller wide}; do
    start=$(date +%s)
    python3 -m fuzz run --device "$DEVICE" --contract "$contract" --seed "$SEED" --max-examples "$N" \
      --known-issues known-issues.json --corpus "$tmp/corpus-$contract" --report "$tmp/$contract.json" \
      --workers "$PARALLEL" --quiet --confirm 1 > "$tmp/$contract.log" 2>&1
    code=$?
    echo "$contract: exit $code ($(( $(date +%s) - start )) s)"; tail -30 "$tmp/$contract.log"
    python3 lab/scripts/oracle_summary.py report "$tmp/$contract.json" "$DEVICE-$contract" >> "$OUT/oracles.jsonl"
  done
  start=$(date +%s)
  python3 -m fuzz list --json | python3 -c 'import json,sys; print("\n".join(t["name"] for t in json.load(sys.stdin)))' \
    | xargs -P "$PARALLEL" -I{} sh -c "timeout ${SELFTEST_TIMEOUT:-240} python3 -m fuzz selftest --shared --target {} --device $SELFTEST_DEVICE \
        --max-examples $SELFTEST_N --json $tmp/selftest-{}.json > $tmp/selftest-{}.log 2>&1"
  echo "selftest --shared ($(( $(date +%s) - start )) s)"
  python3 lab/scripts/oracle_summary.py selftest "$tmp"/selftest-*.json > "$OUT/selftest-shared.json"
  cat "$tmp"/selftest-*.log | grep -v "^    survived" | sort -u
} 2>&1 | tee "$OUT/oracles.log"
