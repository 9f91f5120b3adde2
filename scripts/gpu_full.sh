#!/usr/bin/env bash
# The full GPU check kept in lab/gpu-runs/: every target on CUDA under the
# caller and wide contracts and under --stress, the planted crash / sync /
# race bugs with replay, and the CUDA test suite. Writes to $OUT:
# session.log, cuda-caller.json, cuda-wide.json, cuda-stress.json, planted.json,
# failures.tar, pytest.log.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
SEED=${SEED:-0}; N=${N:-200}
FAILS=$(mktemp -d)
run() { echo "== python -m fuzz $*"; python3 -m fuzz "$@"; echo "exit $?"; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, numpy, hypothesis, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__, "hypothesis", hypothesis.__version__, "triton", triton.__version__)'
  run run --device cuda --seed "$SEED" --max-examples "$N" --contract caller --corpus /tmp/c-caller --report "$OUT/cuda-caller.json" --quiet --confirm 3
  run run --device cuda --seed "$SEED" --max-examples $((N / 2)) --contract wide --corpus /tmp/c-wide --report "$OUT/cuda-wide.json" --quiet --confirm 1
  run run --device cuda --seed "$SEED" --max-examples $((N / 2)) --stress --corpus /tmp/c-stress --report "$OUT/cuda-stress.json" --quiet --confirm 1
  PLANTED="--target ${CRASH_PLANT:-planted-dg-output-size-off-by-one} --target planted-offsets-extra-sync --target planted-glm4-reused-staging-buffer --target fla-chunk-offsets"
  SYNCFUZZ_TARGET_MODULES=tests.planted run run --device cuda --seed "$SEED" --max-examples 100 --stress $PLANTED --corpus /tmp/c-planted --report "$OUT/planted.json" --quiet --confirm 2 --max-restarts 1
  for c in caller wide stress planted; do cp /tmp/c-$c/failures/*.json "$FAILS/" 2>/dev/null; done
  for f in /tmp/c-planted/failures/*.json; do [ -e "$f" ] && run replay "$f"; done
} 2>&1 | tee "$OUT/session.log"
python3 -m pytest -q -n 4 -p no:cacheprovider tests/gpu/test_gpu.py tests/unit/test_keye.py tests/unit/test_ernie45_vl.py tests/e2e/test_paddleocr_vl.py tests/unit/test_diffusion_gemma.py tests/unit/test_keep_on_cpu.py > "$OUT/pytest.log" 2>&1; echo "pytest exit $?" | tee -a "$OUT/session.log"
tail -5 "$OUT/pytest.log" | tee -a "$OUT/session.log"
tar -C "$FAILS" -cf "$OUT/failures.tar" .
