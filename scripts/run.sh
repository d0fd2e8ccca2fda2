#!/usr/bin/env bash
# The main job: installs what is missing, builds ortc, compiles the bundled MLP sample
# into a training step and shows its IR and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ORTC=build/tools/ortc/ortc
MODEL=samples/mlp/mlp.onnx
echo "== ortc inspect $MODEL"
$ORTC inspect "$MODEL" --dim batch=4
echo "== imported IR"
$ORTC build "$MODEL" --dim batch=4 --stop-after import
echo "== training step (AdamW), summary"
$ORTC build "$MODEL" --dim batch=4 --optimizer adamw --stop-after training |
  grep -E "func.func|ortc.global" | cut -c1-160
