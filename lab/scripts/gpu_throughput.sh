#!/usr/bin/env bash
# Throughput on the GPU host (issue #17), this tree and optionally an older one
# side by side: bench parts a/d (fuzzer vs bare @given vs rounds), part s (where
# an example's time goes) and the 16-worker nightly. Writes to $OUT (or
# ./gpu-out): throughput.log and one JSON per step and tree.
#   STEPS   any of: ad s nightly (default "ad s nightly")
#   BEFORE  a directory holding the older tree (e.g. `git archive <commit> | tar -x -C .before`)
#   EXAMPLES, REPEATS (part a/d), BUDGET, WORKERS (nightly)
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)  # absolute: each tree's step runs in its own directory
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
STEPS=${STEPS:-ad s nightly}; EXAMPLES=${EXAMPLES:-150}; REPEATS=${REPEATS:-3}
BUDGET=${BUDGET:-150}; WORKERS=${WORKERS:-16}; SEED=${SEED:-20261201}
HERE=$(pwd)
trees="after=$HERE"; [ -n "${BEFORE:-}" ] && trees="before=$(cd "$BEFORE" && pwd) $trees"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, hypothesis; print("torch", torch.__version__, "hypothesis", hypothesis.__version__)'
  nproc
  for step in $STEPS; do
    for pair in $trees; do
      name=${pair%%=*}; tree=${pair#*=}
      cd "$tree" || exit 2
      start=$(date +%s)
      case $step in
        ad) echo "== [$name] python -m bench.run --device cuda --parts ad --examples $EXAMPLES --repeats $REPEATS"
            PYTHONPATH=. python3 -m bench.run --device cuda --parts ad --examples "$EXAMPLES" --repeats "$REPEATS" \
              --json "$OUT/$name-ad.json" | tail -3 ;;
        s)  echo "== [$name] python -m bench.run --device cuda --parts s --examples $EXAMPLES"
            PYTHONPATH=. python3 -m bench.run --device cuda --parts s --examples "$EXAMPLES" \
              --json "$OUT/$name-s.json" > "$OUT/$name-s.log"; tail -2 "$OUT/$name-s.log" ;;
        nightly)
            echo "== [$name] python -m fuzz run --profile nightly --budget $BUDGET --workers $WORKERS --pieces 2 --seed $SEED"
            rm -rf /tmp/throughput-corpus
            PYTHONPATH=. python3 -m fuzz run --profile nightly --budget "$BUDGET" --workers "$WORKERS" --pieces 2 \
              --seed "$SEED" --corpus /tmp/throughput-corpus --report "$OUT/$name-nightly.json" --quiet \
              --known-issues known-issues.json > /dev/null 2>&1
            echo "exit $?"
            python3 - "$OUT/$name-nightly.json" "$BUDGET" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
# One item per target and device: every one must have run examples ("every item served").
items = {(t["name"], device): tally["examples"] for t in report["targets"] for device, tally in t["by_device"].items()}
total = sum(items.values())
print(f"{total} examples, {total / float(sys.argv[2]):.0f}/s, {len(items)} items, fewest {min(items.values())}, "
      f"items with none {sum(n == 0 for n in items.values())}")
EOF
            ;;
      esac
      echo "($(( $(date +%s) - start )) s)"
      cd "$HERE" || exit 2
    done
  done
} 2>&1 | tee "$OUT/throughput.log"
