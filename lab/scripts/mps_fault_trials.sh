#!/usr/bin/env bash
# Fault containment under CUDA MPS (issue #25, docs/gpu-sharing.md#faults), on a GPU host: TRIALS runs per
# planted fault (tests/gpu_faults.py: a device-side assert, an illegal address), each beside 7 real targets
# on 8 workers sharing the GPU through MPS. A trial is correct when the faulting target has its crash with the
# input saved and every real target ran examples with no failure of its own (lab/scripts/mps_check.py trial).
# Then one run is stopped with SIGTERM mid-way: no MPS process and no fuzz worker may be left.
# Writes trials.log (and the reports, tarred) to $OUT. Run from the repo root.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 SYNCFUZZ_TARGET_MODULES=tests.gpu_faults
TRIALS=${TRIALS:-5}; BUDGET=${BUDGET:-20}  # 8 s was too short: 8 workers starting under MPS take > 7 s
real="--target fla-chunk-indices --target glm4v-embeddings --target paddleocr-encode-image --target ernie-rot-pos-emb
      --target diffusion-gemma-states --target keep-on-cpu-interns1-num-patches --target cpu-gpu-buffer-copy-to-gpu"
mps_left() { ps -eo stat,comm | awk '$1 !~ /^Z/ && $2 ~ /^nvidia-cuda-mps/' | wc -l; }
workers_left() { pgrep -f "fuzz.run.isolation --serve|fuzz.run.xdist_items|fuzz.run.replay" | wc -l; }
passed=0; total=0
{
  for trial in $(seq 1 "$TRIALS"); do
    for fault in fault-device-assert fault-illegal-address; do
      total=$((total + 1)); name="trial-$trial-$fault"; start=$(date +%s)
      # --max-restarts 1: the faulting target faults at most twice, so each trial ends within its budget.
      python3 -m fuzz run --device cuda --workers 8 --gpu-share mps --target "$fault" $real --budget "$BUDGET" \
        --confirm 1 --max-restarts 1 --quiet --corpus "/tmp/$name" --report "$OUT/$name.json" > "$OUT/$name.log" 2>&1
      rc=$?
      echo "== $name: exit $rc in $(( $(date +%s) - start )) s; MPS processes left $(mps_left), workers left $(workers_left)"
      grep -E "re-run outside MPS|took no new client|under MPS" "$OUT/$name.log" | sort | uniq -c | head -5
      if python3 lab/scripts/mps_check.py trial "$fault" "$OUT/$name.json" && [ "$rc" -eq 1 ] && [ "$(mps_left)" -eq 0 ]; then
        passed=$((passed + 1))
      else
        echo "   trial NOT correct"; tail -5 "$OUT/$name.log"
      fi
    done
  done
  echo "fault containment: $passed/$total trials correct"
  echo "== SIGTERM of a run under MPS, 15 s into a 60 s budget"
  python3 -m fuzz run --device cuda --workers 8 --gpu-share mps $real --target fault-illegal-address --budget 60 \
    --confirm 0 --quiet --corpus /tmp/sigterm --report "$OUT/sigterm.json" > "$OUT/sigterm.log" 2>&1 &
  run=$!; sleep 15
  echo "before: MPS processes $(mps_left), workers $(workers_left)"
  kill -TERM "$run"; wait "$run"; rc=$?
  sleep 2
  echo "after SIGTERM: exit $rc, MPS processes $(mps_left), workers $(workers_left)"
  grep -E "^interrupted|^result" "$OUT/sigterm.log"
  [ "$(mps_left)" -eq 0 ] && [ "$(workers_left)" -eq 0 ] && [ "$passed" -eq "$total" ]
} 2>&1 | tee "$OUT/trials.log"
exit "${PIPESTATUS[0]}"
