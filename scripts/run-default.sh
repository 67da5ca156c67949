#!/usr/bin/env bash
# The README's main job: install dependencies, build, create the default model if absent,
# run ComfyUI's default text-to-image workflow on it and print the PNG's path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target headroom
mkdir -p models/checkpoints output
model=models/checkpoints/headroom-tiny-sd1.safetensors
[ -f "$model" ] || ./build/headroom make-model --arch sd1 --size tiny --seed 0 -o "$model"
./build/headroom run examples/default_workflow.json --models-dir models --output-dir output
