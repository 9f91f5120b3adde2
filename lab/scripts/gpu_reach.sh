#!/usr/bin/env bash
# The reach work's checks on the GPU host (#23; docs/reach.md, docs/verdicts.md#which-sync-rule), after
# scripts/gpu_check.sh: on CUDA,
#  1. two trees with the same syncs (0.27.1 and a benign refactor of it, lab/scripts/sync_rule_trees.py): no sync
#     regression under the default rule; the old behaviour (--sync-budget apply) for comparison;
#  2. the same refactor with one extra device->host read planted: a sync regression;
#  3. the releases 0.28.0 vs 0.33.0, every target, with coverage and --require-changes-covered;
#  4. the cost of coverage on CUDA (bench part v, a few targets).
# Writes to $OUT (or ./gpu-out): reach.log and bench-v-cuda.json; the JSON reports to $REPORTS (default $OUT).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
REPORTS=${REPORTS:-$OUT}; mkdir -p "$REPORTS"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
N=${N:-100}
TREES=/tmp/sync-rule-trees
PAIR=(--target glm4v-embeddings --target fla-chunk-indices --target diffusion-gemma-states)
run() {  # label, then fuzz run arguments; prints the exit code
  local label=$1; shift
  echo "== $label: python -m fuzz run $*"
  python3 -m fuzz run --device cuda --seed 0 --max-examples "$N" --confirm 0 --quiet --coverage \
    --corpus "/tmp/reach-corpus-$label" --report "$REPORTS/$label.json" "$@" 2>&1 | grep -v '^\[fuzz\]'
  echo "$label exit ${PIPESTATUS[0]}"
}
{
  python3 lab/scripts/sync_rule_trees.py "$TREES"
  run same-syncs --legacy "$TREES/base" --optimized "$TREES/refactor" "${PAIR[@]}"
  run same-syncs-budget --legacy "$TREES/base" --optimized "$TREES/refactor" --sync-budget apply "${PAIR[@]}"
  run planted --legacy "$TREES/base" --optimized "$TREES/planted" "${PAIR[@]}"
  run releases --legacy vllm==0.28.0 --optimized vllm==0.33.0 --require-changes-covered
  python3 - "$REPORTS" <<'EOF'
import json, sys
out = sys.argv[1]
for label in ("same-syncs", "same-syncs-budget", "planted", "releases"):
    report = json.load(open(f"{out}/{label}.json"))
    for t in report["targets"]:
        tally = t["by_device"].get("cuda", {})
        pairs = tally.get("sync_pairs", {})
        syncs = tally.get("syncs_per_call", {})
        print(f"{label:18} {t['name']:34} {t['verdict']:16} rule {t.get('sync_rule')}  pairs {pairs}  "
              f"syncs legacy {syncs.get('legacy')} optimized {syncs.get('optimized')}")
EOF
  [ "${BENCH:-1}" = 1 ] || exit 0
  echo "== bench part v (coverage on vs off), cuda"
  python3 -m bench.run --parts v --device cuda --examples 100 --repeats 3 --target glm4v-embeddings \
    --target keye-encoder-rope --target diffusion-gemma-sampler --target fla-chunk-indices --json "$OUT/bench-v-cuda.json"
} 2>&1 | tee "$OUT/reach.log"
