#!/usr/bin/env bash
# The README's main job: install dependencies, build, run ComfyUI's default text-to-image
# workflow on the bundled default model (models/README.md) and print the PNG's path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target headroom
model=models/checkpoints/headroom-tiny-sd1.safetensors
[ -f "$model" ] || { echo "$model is missing: it is part of the repository (git checkout -- models)" >&2; exit 1; }
mkdir -p output
# Threads that sleep instead of spinning while they wait: on a machine busy with other work the
# spinning made this job ~3x slower (README, "Two commands").
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
./build/headroom run examples/default_workflow.json --models-dir models --output-dir output
