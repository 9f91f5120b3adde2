#!/usr/bin/env bash
# How much of a budgeted multi-worker run goes to fuzzing, this tree against another one, same host:
#   git worktree add /tmp/before <commit>; OLD=/tmp/before bash lab/scripts/startup_ab.sh
# ROUNDS alternating runs of each tree (seed = round) of glm4v-embeddings + fla-chunk-offsets, W workers x
# W pieces, B s budget, on DEVICE (cpu by default: the fuzz process start needs no GPU; on a GPU host set
# DEVICE=cuda, and the CUDA context start is measured too). Per run: examples, and the items' fuzzing
# seconds over W x the fuzzing phase (the share start-up leaves). Reports under ${TMPDIR:-/tmp}/startup-ab.
set -u
OLD=${OLD:?OLD=path of the other tree}; NEW=${NEW:-$(pwd)}
W=${W:-2}; B=${B:-20}; ROUNDS=${ROUNDS:-3}; DEVICE=${DEVICE:-cpu}
DIR=${TMPDIR:-/tmp}/startup-ab; mkdir -p "$DIR"
count() { python3 -c "
import json, sys
r = json.load(open(sys.argv[1])); t = r['targets']
secs = [p['seconds'] for e in t for p in e['placement']]
phase, w = r['run']['machine']['seconds'], r['run']['workers']
print(sum(e['examples'] for e in t), 'examples; items fuzzed %.1f s of %d x %.1f s: share %.2f'
      % (sum(secs), w, phase, sum(secs) / (w * phase)))" "$1"; }
for round in $(seq 1 "$ROUNDS"); do
  for tree in "$OLD" "$NEW"; do
    name=$([ "$tree" = "$OLD" ] && echo old || echo new)-$round
    (cd "$tree" && PYTHONPATH=. python3 -m fuzz run --quiet --device "$DEVICE" --target glm4v-embeddings \
      --target fla-chunk-offsets --workers "$W" --pieces "$W" --budget "$B" --confirm 0 --seed "$round" \
      --corpus "$DIR/corpus-$name" --report "$DIR/$name.json" > "$DIR/$name.log" 2>&1)
    echo "$name: exit $? $(count "$DIR/$name.json")"
  done
done
