#!/usr/bin/env bash
# Lab probe (issue #45 item 7): one CUDA run on one host against the same run split in N shards, each with
# its own corpus, then merge-reports + corpus-merge; prints whether the merged counts and example database
# equal one host's. Writes to $OUT (or ./gpu-out): shards.log, whole.json, merged.json.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-cuda}; CONTRACT=${CONTRACT:-wide}; N=${N:-3}; SEED=${SEED:-0}; EXAMPLES=${EXAMPLES:-60}; TARGETS=${TARGETS:-"fla-chunk-indices keye-encoder-rope keep-on-cpu-ultravox-audio-lens"}
work=$(mktemp -d)
args=(--device "$DEVICE" --contract "$CONTRACT" --seed "$SEED" --max-examples "$EXAMPLES" --pieces "$N" --quiet --confirm 1
      --known-issues known-issues.json)
for t in $TARGETS; do args+=(--target "$t"); done
{
  python3 -m fuzz run "${args[@]}" --corpus "$work/whole" --report "$OUT/whole.json"; echo "whole exit $?"
  for i in $(seq 1 "$N"); do
    python3 -m fuzz run "${args[@]}" --shard "$i/$N" --corpus "$work/corpora/shard$i" --report "$work/shard$i.json"
    echo "shard $i/$N exit $?"
  done
  python3 -m fuzz merge-reports "$OUT/merged.json" "$work"/shard*.json; echo "merge-reports exit $?"
  python3 -m fuzz corpus-merge "$work/merged" "$work"/corpora/shard*; echo "corpus-merge exit $?"
  python3 - "$OUT/whole.json" "$OUT/merged.json" "$work/whole/hypothesis" "$work/merged/hypothesis" <<'EOF'
import json, sys
from pathlib import Path

def counts(name):
    data = json.load(open(name))
    return {t["name"]: (t["examples"], t.get("shrink_steps", 0), t["verdict"],
                        sorted({(f["device"], f["verdict"]) for f in t["failures"]})) for t in data["targets"]}

def database(root):
    root = Path(root)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()

whole, merged = counts(sys.argv[1]), counts(sys.argv[2])
for name in sorted(whole):
    print(f"{name}: one host {whole[name]} | merged {merged.get(name)}")
print("examples and verdicts equal:", {k: v[0::2] for k, v in whole.items()} == {k: v[0::2] for k, v in merged.items()})
one, union = database(sys.argv[3]), database(sys.argv[4])
print(f"example database: one host {len(one)} files, merged {len(union)} files, equal: {one == union}")
for name in sorted(one ^ union):
    print(f"  only in the {'merged' if name in union else 'one host'} database: {name}")
EOF
} 2>&1 | tee "$OUT/shards.log"
