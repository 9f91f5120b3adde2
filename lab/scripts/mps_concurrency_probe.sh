#!/usr/bin/env bash
# #25: lab/scripts/mps_concurrency_probe.py at 1 and W processes, time-sliced and under a private MPS daemon.
# RUNS picks the cases (default "1-off W-off 1-mps W-mps"; "W" stands for $W). Where py-spy is installed
# it samples two of the W processes under MPS during the fuzz phase. Everything lands in
# $OUT/probe.tar.gz (the device returns few files) and $OUT/probe.log.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT/p"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
W=${W:-16}; WINDOW=${WINDOW:-6}; LEAD=${LEAD:-25}; RUNS=${RUNS:-1-off W-off 1-mps W-mps}
P="python3 lab/scripts/mps_concurrency_probe.py --window $WINDOW --lead $LEAD"
spy() {  # during the fuzz phase of a W-process run: one child raw, one native
  command -v py-spy > /dev/null || return 0
  sleep $(( LEAD + 1 ))
  local kids=($(pgrep -f "mps_concurrency_probe.py --child"))
  timeout 20 py-spy record -r 200 -d 4 -f raw --idle -o "$OUT/p/$1-spy.txt" --pid "${kids[0]}" > "$OUT/p/$1-spy.log" 2>&1
  timeout 30 py-spy record -r 100 -d 4 -f raw --idle --native -o "$OUT/p/$1-native.txt" --pid "${kids[1]}" > "$OUT/p/$1-native.log" 2>&1
}
probe() {  # procs, mode
  local label="$1-$2"
  if [ "$1" -gt 1 ]; then spy "$2" & fi
  $P --procs "$1" --label "$label"; wait
}
{
  echo "cores $(nproc); $(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader)"
  for run in $RUNS; do
    procs=${run%-*}; mode=${run#*-}; [ "$procs" = W ] && procs=$W
    [ "$mode" = off ] && probe "$procs" off
  done
  if [[ " $RUNS " == *"-mps "* ]]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpsp CUDA_MPS_LOG_DIRECTORY=/tmp/mpsl
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    nvidia-cuda-mps-control -d && echo "MPS started"
    for run in $RUNS; do
      procs=${run%-*}; mode=${run#*-}; [ "$procs" = W ] && procs=$W
      [ "$mode" = mps ] && probe "$procs" mps
    done
    echo quit | nvidia-cuda-mps-control; sleep 2
    echo "MPS left: $(pgrep -c nvidia-cuda-mps || true)"
  fi
} 2>&1 | tee "$OUT/probe.log"
cp "$OUT/probe.log" "$OUT/p/"; tar -czf "$OUT/probe.tar.gz" -C "$OUT" p && rm -rf "$OUT/p"
