#!/usr/bin/env bash
# Throughput of the nightly profile per configuration (issues #6, #7): each
# CONFIG is "label:gpus:workers:cores:pieces" (gpus as CUDA_VISIBLE_DEVICES,
# cores as taskset's list, "-" for all). Writes to $OUT: scaling.log, smi.csv
# (per-GPU utilisation every 0.5 s), nightly-<label>.json.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-45}; DEVICE=${DEVICE:-cuda}
CONFIGS=${CONFIGS:-"g1w1:0:1:-:2 g1w16:0:16:0-15:2 g2w2:0,1:2:-:2 g2w4:0,1:4:-:2"}
{
  date -u; nproc; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, numpy, hypothesis, triton, xdist; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "numpy", numpy.__version__, "hypothesis", hypothesis.__version__, "triton", triton.__version__, "xdist", xdist.__version__)'
} 2>&1 | tee "$OUT/scaling.log"
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -lms 500 > "$OUT/smi.csv" 2>&1 &
SMI=$!
for config in $CONFIGS; do
  IFS=: read -r label gpus workers cores pieces <<< "$config"
  pin=(); [ "$cores" != "-" ] && pin=(taskset -c "$cores")
  echo "== $(date -u +%T) $label: CUDA_VISIBLE_DEVICES=$gpus ${pin[*]} fuzz run --profile nightly --device $DEVICE --budget $BUDGET --workers $workers --pieces $pieces" | tee -a "$OUT/scaling.log"
  start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$gpus "${pin[@]}" python3 -m fuzz run --profile nightly --device "$DEVICE" --budget "$BUDGET" \
    --workers "$workers" --pieces "$pieces" --corpus "/tmp/corpus-$label" --report "$OUT/nightly-$label.json" \
    --quiet --confirm 1 >> "$OUT/scaling.log" 2>&1
  rc=$?; end=$(date +%s.%N)
  python3 - "$OUT/nightly-$label.json" "$start" "$end" "$rc" "$BUDGET" <<'PY' | tee -a "$OUT/scaling.log"
import json, sys, collections
report = json.load(open(sys.argv[1])); wall = float(sys.argv[3]) - float(sys.argv[2]); budget = float(sys.argv[5])
examples = sum(t["examples"] for t in report["targets"])
places = [p for t in report["targets"] for p in t.get("placement", [])]
per_gpu = collections.Counter(); per_worker = collections.Counter(); busy = collections.Counter()
for p in places:
    per_gpu[str(p["gpu"])] += p["examples"]; per_worker[p["worker"]] += p["examples"]; busy[p["worker"]] += p["seconds"]
fuzz_s = max(busy.values()) if busy else sum(t["seconds"] for t in report["targets"])
verdicts = collections.Counter(t["verdict"] for t in report["targets"])
print(f"exit {sys.argv[4]} wall {wall:.1f}s examples {examples} wall-rate {examples / wall:.1f}/s "
      f"budget-rate {examples / budget:.1f}/s busiest-worker {fuzz_s:.1f}s examples-per-gpu {dict(per_gpu)} "
      f"workers {len(per_worker)} verdicts {dict(verdicts)}")
PY
done
kill $SMI
echo "== $(date -u +%T) done" | tee -a "$OUT/scaling.log"
