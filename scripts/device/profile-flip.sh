# Which nodes a switch moves, in one device call: builds bench_profile, profiles one workload
# (a timing event after every node, Note [node timing]) with the defaults and with FLIP set, and
# prints both step times and the per-role node times side by side, the largest differences
# first: whether the nodes a switch targets, or their neighbours, moved. Made for the short-key
# attention kernel (since moved to bench/dev; first run 2026-12-01, PERF_NOTES v11: every role
# moved by the same ~1 %, so that flip was noise).
#   FLIP="HEADROOM_STACK_QKV=0" (the default)  ONLY=sdxl|sd15|vae512|vae1024  TOP=40 (roles printed)
# Logs to $OUT (build_profile.log, profile_default.log, profile_flip.log, profile_flip.md); carry
# .debs (scripts/device/env.sh). A warm machine with the build directory already configured took
# ~2 min for the build and both SDXL profiles.
FLIP=${FLIP:-HEADROOM_STACK_QKV=0}
ONLY=${ONLY:-sdxl}
TOP=${TOP:-40}
device_configure
device_build build_profile.log bench_profile
rm -f "$OUT/configure.log"
for run in default flip; do
  env $([ "$run" = flip ] && echo "$FLIP") timeout 280 ./build-dev/bench/bench_profile \
    --device cuda --dtype f16 --only "$ONLY" --top 400 > "$OUT/profile_$run.log" 2>&1
  echo "bench_profile ($run) exit $?"
done
python3 - "$OUT/profile_default.log" "$OUT/profile_flip.log" "$FLIP" "$TOP" <<'PY' | tee "$OUT/profile_flip.md"
import re, sys

def read(path):
    step, roles = "", {}
    in_roles = False
    for line in open(path, errors="replace"):
        if line.startswith("step "):
            step = line.strip()
        if line.startswith("by role"):
            in_roles = True
            continue
        m = re.match(r"\s+([\d.]+) ms\s+(\d+) x\s+([\d.]+) us\s+(.*)$", line)
        if in_roles and m:
            roles[m[4]] = (float(m[1]), int(m[2]))
        elif in_roles and line.strip() == "":
            in_roles = False
    return step, roles

(s0, r0), (s1, r1) = read(sys.argv[1]), read(sys.argv[2])
flip, top = sys.argv[3], int(sys.argv[4])
print(f"defaults: {s0}\n{flip}: {s1}\n")
print(f"| role | nodes | defaults ms | {flip} ms | difference ms |")
print("|---|---|---|---|---|")
rows = []
for role in set(r0) | set(r1):
    a, b = r0.get(role, (0.0, 0)), r1.get(role, (0.0, 0))
    rows.append((b[0] - a[0], role, max(a[1], b[1]), a[0], b[0]))
rows.sort(key=lambda r: -abs(r[0]))
for d, role, n, a, b in rows[:top]:
    print(f"| {role} | {n} | {a:.3f} | {b:.3f} | {d:+.3f} |")
print(f"\nsummed over every role: {sum(v[0] for v in r0.values()):.3f} -> "
      f"{sum(v[0] for v in r1.values()):.3f} ms (each node carries its timing event)")
PY
