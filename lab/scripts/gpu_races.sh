#!/usr/bin/env bash
# Issue #44 on the GPU host: the race/policy tests, then the all-target CUDA fuzz without and with --race
# (same seed, examples and workers: the race oracle's cost per example is the ratio of the two).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
N=${N:-30}; WORKERS=${WORKERS:-4}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  start=$(date +%s)
  python3 -m pytest -q -n 4 -p no:cacheprovider tests/gpu/test_races.py -rfE > "$OUT/races-pytest.log" 2>&1
  echo "races pytest exit $? ($(( $(date +%s) - start )) s)"; tail -25 "$OUT/races-pytest.log"
  for mode in plain race; do
    flag=""; [ "$mode" = race ] && flag="--race"
    start=$(date +%s)
    python3 -m fuzz run --device cuda --seed 0 --max-examples "$N" --workers "$WORKERS" $flag --confirm 1 \
      --corpus "/tmp/races-$mode" --report "$OUT/cuda-$mode.json" --markdown "$OUT/cuda-$mode.md" \
      --known-issues known-issues.json > "$OUT/cuda-$mode.log" 2>&1
    echo "fuzz $mode exit $? ($(( $(date +%s) - start )) s)"; grep -E "^result|fail|race|copy-policy" "$OUT/cuda-$mode.log" | head -30
  done
} 2>&1 | tee "$OUT/races.log"
