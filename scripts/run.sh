#!/usr/bin/env bash
# The main job: installs what is missing, builds ortc, compiles the bundled MLP sample
# into a training step for the CPU and trains it, showing the loss falling.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ORTC=build/tools/ortc/ortc
MODEL=samples/mlp/mlp.onnx
OUT=build/run
mkdir -p "$OUT"
echo "== ortc inspect $MODEL"
$ORTC inspect "$MODEL" --dim batch=16
echo "== ortc build (AdamW, CPU target)"
$ORTC build "$MODEL" --dim batch=16 --optimizer adamw -o "$OUT/mlp.ortc" --timing 2>&1 |
  grep -E "memory plan|codegen|wrote"
echo "== a feed: 8 batches of 16 samples of a fixed random teacher"
.venv/bin/python - "$OUT/feed.npz" <<'PY'
import sys, numpy as np
rng = np.random.RandomState(0)
x = rng.randn(8, 16, 32).astype(np.float32)
teacher = rng.randn(32, 10)
np.savez(sys.argv[1], x=x, labels=(x @ teacher).argmax(-1).astype(np.int64))
PY
echo "== ortc train"
$ORTC train "$OUT/mlp.ortc" --data "$OUT/feed.npz" --steps 40 --lr 0.01 --eval \
  --log-json "$OUT/log.jsonl" --save-params "$OUT/params.npz" | awk 'NR % 5 == 1 || /eval/'
