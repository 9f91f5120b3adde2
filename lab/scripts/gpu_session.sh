#!/usr/bin/env bash
# One GPU session: versions, every target on CUDA under both contracts, the
# auto-device run, replays of what was saved. Writes to $OUT (or ./gpu-out):
# session.log, cuda-caller.json, cuda-wide.json, auto.json, failures.tar.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
SEED=${SEED:-0}; N=${N:-300}
FAILS=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, numpy, hypothesis, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__, "hypothesis", hypothesis.__version__, "triton", triton.__version__)'
  for contract in caller wide; do
    echo "== python -m fuzz run --device cuda --seed $SEED --max-examples $N --contract $contract"
    python3 -m fuzz run --device cuda --seed "$SEED" --max-examples "$N" --contract "$contract" \
      --corpus "/tmp/corpus-$contract" --report "$OUT/cuda-$contract.json" --quiet; echo "exit $?"
    cp /tmp/corpus-$contract/failures/*.json "$FAILS/" 2>/dev/null
  done
  echo "== python -m fuzz run --seed $SEED (auto device, default budget)"
  python3 -m fuzz run --seed "$SEED" --corpus /tmp/corpus-auto --report "$OUT/auto.json" --quiet; echo "exit $?"
  for f in "$FAILS"/*.json; do
    [ -e "$f" ] || continue
    echo "== python -m fuzz replay $(basename "$f")"; python3 -m fuzz replay "$f"; echo "exit $?"
  done
  if [ -n "${EXTRA:-}" ]; then echo "== $EXTRA"; bash -c "$EXTRA"; echo "exit $?"; fi
} 2>&1 | tee "$OUT/session.log"
tar -C "$FAILS" -cf "$OUT/failures.tar" .
