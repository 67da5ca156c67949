# bench_streaming's SDXL rows in one device call (~4 min on a fresh H200): each budget with the
# streamed set planned on the clock and spread (the default, Note [spreading copies]) and by reuse
# alone, with the CPU time of each residency plan (made once per room, Note [residency cache]).
# VARIANTS (space-separated env assignments, "none" for as is) adds more runs, e.g.
#   VARIANTS="none HEADROOM_CUDA_GRAPHS=0"   (uncaptured steps)
#   VARIANTS="none HEADROOM_GRAPH_PASSES=0,HEADROOM_CUDA_GRAPHS=0"
# (commas inside one variant separate its assignments; ~2.5 min per variant). Logs to $OUT;
# carry .debs.
device_configure
device_build build.log bench_streaming
for v in ${VARIANTS:-none}; do
  env $([ "$v" = none ] || echo "${v//,/ }") timeout 240 \
    ./build-dev/bench/bench_streaming --device cuda --dtype f16 --steps 8 --only sdxl \
    > "$OUT/spread_${v%%=*}.log" 2>&1
  echo "== $v (exit $?)"
  grep -E "^\| SDXL" "$OUT/spread_${v%%=*}.log" | cut -d'|' -f3,4,9
  grep -oE "timed step [0-9.]+ ms|residency plan made once in [0-9.]+ ms" "$OUT/spread_${v%%=*}.log"
done
