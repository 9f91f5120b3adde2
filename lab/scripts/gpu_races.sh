#!/usr/bin/env bash
# Issue #44 on the GPU host: the race/policy GPU tests, the all-target CUDA fuzz with --race (known issues
# applied), the race oracle's cost per example (bench part r), and the CUDA stream sanitizer's cost on one target.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
N=${N:-30}; WORKERS=${WORKERS:-6}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  start=$(date +%s)
  python3 -m pytest -q -n 4 -p no:cacheprovider tests/gpu/test_races.py -rfE > "$OUT/races-pytest.log" 2>&1
  echo "races pytest exit $? ($(( $(date +%s) - start )) s)"; tail -25 "$OUT/races-pytest.log"
  start=$(date +%s)
  python3 -m fuzz run --device cuda --race --seed 0 --max-examples "$N" --workers "$WORKERS" --confirm 1 \
    --corpus /tmp/races-all --report "$OUT/cuda-race.json" --markdown "$OUT/cuda-race.md" \
    --known-issues known-issues.json > "$OUT/cuda-race.log" 2>&1
  echo "fuzz --race exit $? ($(( $(date +%s) - start )) s)"; grep -E "^result|race|copy-policy|new" "$OUT/cuda-race.log" | head -40
  start=$(date +%s)
  timeout 150 python3 -m bench.run --parts r --device cuda --examples 20 --repeats 2 --json "$OUT/bench-r.json" \
    --target async-tensor-h2d --target cpu-gpu-buffer-copy-to-gpu --target qwen2-vl-rot-pos-emb \
    --target staged-write-tensor-apply-write --target mm-batched-field-reduce-data --target fla-chunk-indices \
    > "$OUT/bench-r.log" 2>&1
  echo "bench r exit $? ($(( $(date +%s) - start )) s)"; cat "$OUT/bench-r.log" | tail -10
  for san in 0 1; do
    start=$(date +%s%N)
    TORCH_CUDA_SANITIZER=$san timeout 100 python3 -m fuzz run --device cuda --seed 0 --max-examples 50 --in-process \
      --target staged-write-tensor-apply-write --quiet --confirm 1 > "$OUT/sanitizer-$san.log" 2>&1
    echo "TORCH_CUDA_SANITIZER=$san exit $? ($(( ($(date +%s%N) - start) / 1000000 )) ms)"; tail -2 "$OUT/sanitizer-$san.log"
  done
} 2>&1 | tee "$OUT/races.log"
