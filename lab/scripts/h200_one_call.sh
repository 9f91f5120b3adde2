#!/usr/bin/env bash
# Everything one short device lease allows for a change to a CUDA path plus #25's start-up figure, in
# priority order, each step cut to the time left (END: seconds after start by which all must be done):
#   1. scripts/gpu_check.sh    the whole suite and the all-target CUDA fuzz (the change's proof; first)
#   2. gpu_share_bench scale   CUDA-only glm4v-embeddings + fla-chunk-offsets, 1 worker vs W under MPS
#   3. mps_concurrency_probe   the same phases timed in 1 process (no MPS) and in W under a private daemon
# After each step everything is packed into $OUT/all.tar.gz (the device returns at most 8 files), and the
# three logs are copied beside it, so a call cut short still returns what finished.
# Carry .whl (coverage, matplotlib, nvidia-ml-py wheels); run from the repo root.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT/w"
W=${W:-16}; END=${END:-420}
t0=$(date +%s)
left() { echo $(( END - ($(date +%s) - t0) )); }
pack() { tar -czf "$OUT/all.tar.gz" -C "$OUT" w; cp "$OUT"/w/*.log "$OUT/" 2>/dev/null; true; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=.:/tmp/site || { echo "wheels did not install"; exit 1; }
export PYTHONUNBUFFERED=1
echo "cores $(nproc); $(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader)"
echo "== 1. gpu_check (left $(left) s)"
OUT="$OUT/w" WORKERS=$W timeout $(( $(left) - 150 )) bash scripts/gpu_check.sh > /dev/null 2>&1
echo "gpu_check exit $?"; grep -E "^(pytest exit|fuzz exit|[0-9]+ (passed|failed))|result:|passed|failed" "$OUT/w/check.log" | tail -6
pack
echo "== 2. scale (left $(left) s)"
[ "$(left)" -gt 110 ] && OUT="$OUT/w" PARTS=scale W=$W timeout $(( $(left) - 10 )) bash lab/scripts/gpu_share_bench.sh 2>&1 | tail -8
pack
echo "== 3. probe (left $(left) s)"
[ "$(left)" -gt 90 ] && OUT="$OUT/w" W=$W RUNS="1-off W-mps" WINDOW=${WINDOW:-3} LEAD=${LEAD:-24} \
  timeout $(( $(left) - 5 )) bash lab/scripts/mps_concurrency_probe.sh 2>&1 | tail -4
# A probe cut short leaves its daemon (it runs in its own session): quit it, then count what is left.
CUDA_MPS_PIPE_DIRECTORY=/tmp/mpsp nvidia-cuda-mps-control <<< quit > /dev/null 2>&1; sleep 1
echo "MPS processes left: $(pgrep -c nvidia-cuda-mps || true)"
pack
echo "done in $(( $(date +%s) - t0 )) s"
