#!/usr/bin/env bash
# The README's main job: install dependencies, build, run headroom on the bundled default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target headroom
./build/headroom --version
./build/headroom probe
