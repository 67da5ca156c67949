# GPU runs of the diagnosis commands (issue 18) in one go: build with CUDA, the diagnosis unit
# and CLI tests, `headroom probe` (text, --json, --plot), `headroom plan --explain` and `headroom
# bench` on full-size random-weight workflows: SD1.5 512x512 and SDXL 1024x1024, under a budget
# that forces streaming. Logs, JSON and charts go to $OUT (or ./device-logs); carry .debs
# (scripts/device/env.sh). PARTS picks what runs after the build, so that the work fits several
# device calls: PARTS="tests probe" then PARTS="sd1 sdxl" then PARTS=control.
RUNS=${RUNS:-3}
STEPS=${STEPS:-8}
SDXL_BUDGET=${SDXL_BUDGET:-4GiB}  # the SDXL UNet alone is ~4.8 GiB in f16: it must stream
SD1_BUDGET=${SD1_BUDGET:-1GiB}    # the SD1.5 UNet is ~1.6 GiB in f16
PARTS=${PARTS:-"tests probe sd1 sdxl control"}
part() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p /tmp/hr/models/checkpoints /tmp/hr/out
device_configure
ninja -C build-dev -j"$(nproc)" headroom hr_tests_diagnose hr_tests_cli \
  > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build ok"
B=./build-dev/headroom

if part tests; then
  ./build-dev/tests/hr_tests_diagnose 2>&1 | tail -3 | tee "$OUT/tests_diagnose.log"
  ./build-dev/tests/hr_tests_cli --gtest_filter='DiagnoseCli*' > "$OUT/tests_cli_diagnose.log" 2>&1
  grep -E "OK|FAILED|Failure|PASSED" "$OUT/tests_cli_diagnose.log"
fi

if part probe; then
  echo "== probe (text, defaults: 512 MiB blocks, fraction 0.5, with chart)"
  /usr/bin/time -f "probe wall %e s, max RSS %M KiB" $B probe --plot "$OUT/probe.svg" 2>&1 | tee "$OUT/probe.txt"
  echo "== probe --json (block 1 GiB, fraction 0.25)"
  $B probe --json --block-mib 1024 --fraction 0.25 > "$OUT/probe.json" 2> "$OUT/probe_json.err"
  echo "probe --json exit $?"; python3 -m json.tool "$OUT/probe.json" > /dev/null && echo "probe.json parses"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/nvidia_smi_after_probe.txt"
fi
part sd1 || part sdxl || part control || exit 0

python3 - <<'EOF'
import json
base = json.load(open('examples/default_workflow.json'))
for name, ckpt, size in (('sd1', 'sd1-full.safetensors', 512), ('sdxl', 'sdxl-full.safetensors', 1024)):
    j = json.loads(json.dumps(base))
    j['5']['inputs'].update(width=size, height=size)
    j['3']['inputs']['steps'] = int(__import__('os').environ.get('STEPS', '8'))
    j['4']['inputs']['ckpt_name'] = ckpt
    json.dump(j, open(f'/tmp/hr/{name}.json', 'w'))
EOF
for arch in $(part sd1 && echo sd1) $( { part sdxl || part control; } && echo sdxl); do
  f=/tmp/hr/models/checkpoints/$arch-full.safetensors
  [ -f "$f" ] || $B make-model --arch $arch --size full --seed 0 -o "$f" > /dev/null 2>&1 || echo "make-model $arch failed"
done

run_bench() {  # arch budget
  local arch=$1 budget=$2 tag="$1_$2"
  echo "== plan --explain $arch, budget $budget"
  $B plan /tmp/hr/$arch.json --explain --device cuda --models-dir /tmp/hr/models --vram-budget "$budget" \
    2>&1 | tee "$OUT/explain_$tag.txt"
  echo "== bench $arch ${STEPS} steps, $RUNS runs per mode, budget $budget"
  $B bench /tmp/hr/$arch.json --runs "$RUNS" --modes resident,stream,auto --vram-budget "$budget" \
    --device cuda --models-dir /tmp/hr/models --output-dir /tmp/hr/out --plot "$OUT/bench_$tag.svg" \
    2> "$OUT/bench_${tag}_progress.log" | tee "$OUT/bench_$tag.txt"
  $B bench /tmp/hr/$arch.json --runs 1 --modes resident,stream,auto --vram-budget "$budget" \
    --device cuda --models-dir /tmp/hr/models --output-dir /tmp/hr/out --json \
    > "$OUT/bench_$tag.json" 2> /dev/null
  python3 -m json.tool "$OUT/bench_$tag.json" > /dev/null && echo "bench_$tag.json parses"
}
part sd1 && run_bench sd1 "$SD1_BUDGET"
part sdxl && run_bench sdxl "$SDXL_BUDGET"
# The control: the same SDXL workflow with the whole card (everything fits: no saving expected).
part control && run_bench sdxl 100%
exit 0
