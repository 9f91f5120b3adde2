#!/usr/bin/env bash
# #25's A/B on the GPU host: the issue's tree (b06e22c) under a hand-started MPS daemon, as the issue measured
# it, then this tree's nightly with --gpu-share mps; both the 16-worker 150 s nightly. Prepare the old tree in
# the working copy first (it travels with it; delete it after): mkdir oldtree && git archive b06e22c | tar -x -C oldtree
# Carry .whl (coverage, matplotlib, nvidia-ml-py wheels). Writes ab.log and both reports to $OUT.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps .whl/*.whl >/dev/null 2>&1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ab-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ab-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
left() { ps -eo stat,comm | awk '$1 !~ /^Z/ && $2 ~ /^nvidia-cuda-mps/' | wc -l; }
count() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['targets']; print(sum(e['examples'] for e in t), 'examples;', sum(d['examples'] for e in t for n,d in e['by_device'].items() if n=='cpu'), 'cpu;', len(t), 'targets')" "$1"; }
{
echo "MPS before: $(left)"
nvidia-cuda-mps-control -d && echo "daemon started by hand (pipe $CUDA_MPS_PIPE_DIRECTORY)"
s=$(date +%s)
(cd oldtree && PYTHONPATH=. python3 -m fuzz run --profile nightly --budget 150 --workers 16 --pieces 2 --seed 20261201 --quiet --corpus /tmp/ab-old --report "$OUT/old-mps.json" > "$OUT/old-mps.log" 2>&1); echo "b06e22c under the hand-started daemon: exit $? in $(( $(date +%s) - s )) s: $(count $OUT/old-mps.json)"
echo quit | nvidia-cuda-mps-control; sleep 3; echo "MPS after quit: $(left)"
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
s=$(date +%s)
PYTHONPATH=. python3 -m fuzz run --profile nightly --budget 150 --workers 16 --pieces 2 --seed 20261201 --quiet --known-issues known-issues.json --gpu-share mps --corpus /tmp/ab-new --report "$OUT/new-mps.json" > "$OUT/new-mps.log" 2>&1; echo "working tree --gpu-share mps: exit $? in $(( $(date +%s) - s )) s: $(count $OUT/new-mps.json); $(grep -m1 '^machine' $OUT/new-mps.log)"
echo "MPS left: $(left)"
} 2>&1 | tee "$OUT/ab.log"
