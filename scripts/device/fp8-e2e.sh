# ComfyUI's own fp8 workflows on the tiny SD1 checkpoint (issue 38 item 4): makes the end-to-end
# fp8 golden of tests/data/fp8/e2e with real float8_e4m3fn weights (torch >= 2.1) and ComfyUI's
# CLIP tokenizer, on the CPU in float32. Writes $OUT/fp8-e2e/{fp8-e2e-golden.safetensors,
# fp8-e2e-cases.json, fp8_e2e_unet_0.png, fp8_e2e_flags_0.png} (commit them under
# tests/data/fp8/e2e) and the log. Needs python3 with torch >= 2.1 and transformers, and
# ComfyUI's files as .devdata/comfyui.tar.xz (scripts/device.sh flux-e2e:prepare here, carry
# .devdata). Builds nothing.
comfyui_unpack fp8-e2e || exit 1  # scripts/device/env.sh
python3 -c 'import torch, sys; sys.exit(0 if hasattr(torch, "float8_e4m3fn") else 1)' ||
  { echo "fp8-e2e: this torch has no float8_e4m3fn (needs >= 2.1)"; exit 1; }
mkdir -p "$OUT/fp8-e2e"
timeout 300 python3 tests/data/fp8/e2e/make_fp8_e2e_golden.py --comfy /tmp/comfy-src/comfyui \
  --out "$OUT/fp8-e2e" > "$OUT/fp8-e2e.log" 2>&1
rc=$?
tail -8 "$OUT/fp8-e2e.log"
for f in fp8-e2e-golden.safetensors fp8-e2e-cases.json fp8_e2e_unet_0.png fp8_e2e_flags_0.png; do
  if [ -f "tests/data/fp8/e2e/$f" ]; then  # a committed copy: the same bytes?
    cmp -s "tests/data/fp8/e2e/$f" "$OUT/fp8-e2e/$f" && echo "$f: same as committed" ||
      echo "$f: DIFFERS from the committed copy"
  fi
done
exit $rc
