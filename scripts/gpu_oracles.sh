#!/usr/bin/env bash
# Time-boxed GPU check of the oracles (fits one 10-minute device command):
# wide contract (isolated workers), --stress, planted crash / sync / race bugs
# with replay, CUDA tests. Writes session.log, cuda-wide.json, cuda-stress.json,
# planted.json, failures.tar, pytest.log to $OUT.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
FAILS=$(mktemp -d)
run() { echo "== python -m fuzz $*"; timeout "$T" python3 -m fuzz "$@"; echo "exit $?"; }
{
  T=210 run run --device cuda --seed 0 --max-examples 50 --contract wide --corpus /tmp/c-wide --report "$OUT/cuda-wide.json" --quiet --confirm 1 --max-restarts 1
  T=100 run run --device cuda --seed 0 --max-examples 50 --stress --in-process --corpus /tmp/c-stress --report "$OUT/cuda-stress.json" --quiet --confirm 0
  export SYNCFUZZ_TARGET_MODULES=tests.planted
  T=110 run run --device cuda --seed 0 --max-examples 100 --stress --target planted-dg-output-size-off-by-one --target planted-offsets-extra-sync --target planted-glm4-reused-staging-buffer --target fla-chunk-offsets --corpus /tmp/c-planted --report "$OUT/planted.json" --quiet --confirm 2 --max-restarts 1
  for f in /tmp/c-planted/failures/*.json; do [ -e "$f" ] && T=60 run replay "$f"; done
  unset SYNCFUZZ_TARGET_MODULES
  for c in wide stress planted; do cp /tmp/c-$c/failures/*.json "$FAILS/" 2>/dev/null; done
} 2>&1 | tee "$OUT/session.log"
timeout 110 python3 -m pytest -q -n 4 -p no:cacheprovider tests/gpu/test_gpu.py -k "sync_regression or hidden or reused_staging or optimized_offsets" > "$OUT/pytest.log" 2>&1; echo "pytest exit $?" | tee -a "$OUT/session.log"
tail -25 "$OUT/pytest.log" | tee -a "$OUT/session.log"
tar -C "$FAILS" -cf "$OUT/failures.tar" .
