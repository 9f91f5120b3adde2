#!/usr/bin/env bash
# #25: why 16 CUDA workers under MPS each run slower than one worker alone. The CUDA-only 2-target run
# (glm4v-embeddings + fla-chunk-offsets) at 1 and W workers, once per CUDA wait mode (fuzz/cudawait.py,
# SYNCFUZZ_CUDA_WAIT); during each run the host's CPU by process (scripts/cpu_sample.py) and, where py-spy
# is installed, one fuzz process' stacks (raw, collapsed). Carry .whl. Writes logs and reports to $OUT.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps .whl/*.whl >/dev/null 2>&1
W=${W:-16}; B=${B:-30}; MODES=${MODES:-auto yield blocking}; ONE=${ONE:-1}
two="--target glm4v-embeddings --target fla-chunk-offsets"
left() { ps -eo stat,comm | awk '$1 !~ /^Z/ && $2 ~ /^nvidia-cuda-mps/' | wc -l; }
count() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['targets']; print(sum(e['examples'] for e in t), 'examples', [e['examples'] for e in t])" "$1"; }
run() {  # name, then fuzz run arguments
  local name=$1; shift
  local start=$(date +%s)
  python3 -m fuzz run --quiet --corpus "/tmp/probe-$name" --report "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1 &
  local pid=$!
  sleep $(( B / 2 ))
  python3 scripts/cpu_sample.py 5 > "$OUT/$name.cpu" 2>&1
  if command -v py-spy >/dev/null; then
    local worker=$(pgrep -f "fuzz.isolation --serve" | head -1)
    [ -n "$worker" ] && timeout 20 py-spy record -r 200 -d 6 -f raw --idle -o "$OUT/$name.spy" --pid "$worker" > "$OUT/$name.spylog" 2>&1
  fi
  wait $pid
  echo "$name: exit $? in $(( $(date +%s) - start )) s: $(count "$OUT/$name.json"); MPS left $(left)"
  cat "$OUT/$name.cpu"
}
{
  echo "cores $(nproc); MPS before $(left); py-spy $(command -v py-spy || echo absent)"
  [ -n "${OFF:-1}" ] && run "w$W-off" --device cuda $two --workers "$W" --pieces "$W" --budget "$B" --confirm 0 --gpu-share off
  for mode in $MODES; do
    [ "$ONE" = 1 ] && SYNCFUZZ_CUDA_WAIT=$mode run "w1-$mode" --device cuda $two --workers 1 --pieces 1 --budget "$B" --confirm 0
    SYNCFUZZ_CUDA_WAIT=$mode run "w$W-$mode" --device cuda $two --workers "$W" --pieces "$W" --budget "$B" --confirm 0 --gpu-share mps
  done
} 2>&1 | tee "$OUT/probe.log"
