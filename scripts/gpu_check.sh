#!/usr/bin/env bash
# The check every change to a CUDA path runs on the GPU host before it is
# called done (lab/gpu-runs/ keeps each run): the WHOLE test suite, slow tests
# included, then a short all-target CUDA fuzz with the race oracle on (--race; and the run's replays). Writes
# to $OUT (or ./gpu-out): check.log, pytest.log, cuda.json, cuda.md.
# SIDES="vllm==0.28.0:vllm==0.34.0 ..." adds, first, a pre-merge CUDA run per LEGACY:OPTIMIZED pair of sides
# (from the shipped source packs; sides-N.json/.md). BESIDE=1 runs the fuzz beside the suite instead of after it
# (one 10-minute call fits both; nothing in either is timed). Exit 0 only if every part passed.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
WORKERS=${WORKERS:-12}; SEED=${SEED:-0}; N=${N:-100}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, numpy, hypothesis, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__, "hypothesis", hypothesis.__version__, "triton", triton.__version__)'
  # The copied working tree, not git's HEAD (the copy may carry uncommitted work).
  python3 -c 'from fuzz.versions import code_tree; print("code tree", code_tree())'
  sides=0; n=0
  for pair in ${SIDES:-}; do
    n=$((n + 1)); start=$(date +%s)
    echo "== python -m fuzz run --profile premerge --device cuda --legacy ${pair%%:*} --optimized ${pair#*:}"
    python3 -m fuzz run --profile premerge --device cuda --legacy "${pair%%:*}" --optimized "${pair#*:}" \
      --corpus "/tmp/gpu-check-sides-$n" --report "$OUT/sides-$n.json" --markdown "$OUT/sides-$n.md" \
      --known-issues known-issues.json > "$OUT/sides-$n.log" 2>&1
    code=$?; [ "$code" -eq 0 ] || sides=$code
    echo "sides $pair exit $code ($(( $(date +%s) - start )) s)"; grep -E "^(changed|result):" "$OUT/sides-$n.log"
  done
  fuzz_cmd() {
    python3 -m fuzz run --device cuda --race --seed "$SEED" --max-examples "$N" --corpus /tmp/gpu-check-corpus \
      --report "$OUT/cuda.json" --markdown "$OUT/cuda.md" --quiet --confirm 2 --known-issues known-issues.json
  }
  if [ "${BESIDE:-0}" = 1 ]; then
    fstart=$(date +%s)
    ( fuzz_cmd > "$OUT/fuzz.log" 2>&1; echo $? > "$OUT/fuzz.rc" ) &
    fuzz_pid=$!
  fi
  start=$(date +%s)
  # -m "slow or not slow": the default run skips slow tests; this one runs everything.
  python3 -m pytest -q -n "$WORKERS" -p no:cacheprovider -m "slow or not slow" -rfE > "$OUT/pytest.log" 2>&1
  suite=$?
  echo "pytest exit $suite ($(( $(date +%s) - start )) s)"; tail -15 "$OUT/pytest.log"
  echo "== python -m fuzz run --device cuda --race --seed $SEED --max-examples $N (every target)"
  if [ "${BESIDE:-0}" = 1 ]; then
    wait "$fuzz_pid"; fuzz=$(cat "$OUT/fuzz.rc"); cat "$OUT/fuzz.log"; start=$fstart
  else
    start=$(date +%s); fuzz_cmd; fuzz=$?
  fi
  echo "fuzz exit $fuzz ($(( $(date +%s) - start )) s)"
  [ "$suite" -eq 0 ] && [ "$fuzz" -eq 0 ] && [ "$sides" -eq 0 ]
} 2>&1 | tee "$OUT/check.log"
exit "${PIPESTATUS[0]}"
