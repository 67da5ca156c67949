#!/usr/bin/env bash
# The spreading experiment (Note [spreading copies], Note [debug marks]) in one device call
# (~6 min on a fresh H200): bench_streaming's SDXL rows, each budget with the streamed set by reuse
# and on the clock, four times: as is, and with a plain event recorded after every node, after
# every copy group, and after both (HEADROOM_DEBUG_MARKS). Spread plans ran as the planner
# estimated only in timed runs (timing events after every node and group); this tells which of
# the two marks makes the difference. Logs to $OUT; carry .debs (scripts/device-env.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
source scripts/device-env.sh
device_configure
ninja -C build-dev -j"$(nproc)" bench_streaming > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
for marks in none node copy both; do
  env $([ "$marks" = none ] || echo HEADROOM_DEBUG_MARKS=$marks) timeout 150 \
    ./build-dev/bench/bench_streaming --device cuda --dtype f16 --steps 8 --only sdxl \
    > "$OUT/spread_$marks.log" 2>&1
  echo "== marks: $marks (exit $?)"
  grep -E "^\| SDXL" "$OUT/spread_$marks.log" | cut -d'|' -f3,4,9
done
