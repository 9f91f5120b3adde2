#!/usr/bin/env bash
# #25: what reach tracing costs the two cheapest targets, in one process and in W at once, on cuda (under a
# private MPS daemon, as the nightly shares the GPU) and on cpu (lab/scripts/reach_cost_probe.py). Writes
# $OUT/reach-probe.log and $OUT/reach-profile-cuda.txt.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
W=${W:-16}; N=${N:-2000}; R=${R:-3}
P="python3 lab/scripts/reach_cost_probe.py --examples $N --repeats $R --target async-tensor-h2d --target cpu-gpu-buffer-copy-to-gpu"
many() {  # device, label
  for _ in $(seq "$W"); do $P --device "$1" --label "$2" & done; wait
}
{
  echo "cores $(nproc); W=$W N=$N R=$R"
  $P --device cuda --label 1-cuda --profile "$OUT/reach-profile-cuda.txt"
  $P --device cpu --label 1-cpu
  many cpu "$W-cpu"
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/rp-mpsp CUDA_MPS_LOG_DIRECTORY=/tmp/rp-mpsl
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "MPS started"
  trap 'echo quit | nvidia-cuda-mps-control > /dev/null 2>&1' EXIT TERM INT  # never left running
  many cuda "$W-cuda-mps"
  echo quit | nvidia-cuda-mps-control; sleep 2
  echo "MPS processes left: $(pgrep -c nvidia-cuda-mps || true)"
} 2>&1 | tee "$OUT/reach-probe.log"
