# Z-Image end-to-end golden (issue 40 item 4): the tiny Z-Image Turbo workflow run by a PyTorch
# reimplementation of ComfyUI's path (transformers' Qwen2 tokenizer and Qwen3Model, diffusers'
# ZImageTransformer2DModel inside ComfyUI a125cd84's own sampling code, ComfyUI's Flux VAE) on the
# CPU in float32, about 30 s. Writes $OUT/zimage-e2e/{zimage-e2e-golden.safetensors,
# zimage_e2e_0.png, zimage-e2e-workflow.json} (commit them under tests/data/zimage/e2e) and
# $OUT/zimage-e2e.log; the three model files (19 MB) stay in /tmp: the golden's metadata rebuilds
# them (checked here with --models-from-golden). Needs python3 with torch >= 2, numpy,
# transformers and tokenizers; ComfyUI's files as .devdata/comfyui.tar.xz and diffusers' source
# as bench/peers/diffusers (carry .devdata and bench/peers). Builds nothing.
#   scripts/device.sh zimage-e2e:prepare   (here, before the device call) makes both:
#     flux-e2e:prepare (COMFYUI_GIT: a ComfyUI git directory holding a125cd84) and
#     compare:prepare (diffusers from ../shared/peers).
if [ "${1:-}" = prepare ]; then
  ( source scripts/device/flux-e2e.sh prepare ) && ( source scripts/device/compare.sh prepare )
  exit $?
fi
comfyui_unpack zimage-e2e || exit 1  # scripts/device/env.sh
if [ ! -f bench/peers/diffusers/src/diffusers/models/transformers/transformer_z_image.py ]; then
  echo "zimage-e2e: no bench/peers/diffusers (scripts/device.sh zimage-e2e:prepare, carry bench/peers)"
  exit 1
fi
mkdir -p "$OUT/zimage-e2e"
rm -rf /tmp/zimage-e2e-models /tmp/zimage-e2e-again
timeout 300 python3 tests/data/zimage/e2e/make_zimage_e2e_golden.py --comfy /tmp/comfy-src/comfyui \
  --diffusers bench/peers/diffusers --out "$OUT/zimage-e2e" --models /tmp/zimage-e2e-models \
  > "$OUT/zimage-e2e.log" 2>&1
rc=$?
tail -12 "$OUT/zimage-e2e.log"
if [ $rc = 0 ]; then  # the golden's metadata writes the same model files again
  timeout 120 python3 tests/data/zimage/e2e/make_zimage_e2e_golden.py --models-from-golden \
    "$OUT/zimage-e2e/zimage-e2e-golden.safetensors" /tmp/zimage-e2e-again || rc=1
  for f in diffusion_models/tiny-zimage.safetensors text_encoders/tiny-qwen3.safetensors \
    vae/tiny-flux-ae.safetensors; do
    cmp -s "/tmp/zimage-e2e-models/$f" "/tmp/zimage-e2e-again/$f" || { echo "$f: rebuilt file differs"; rc=1; }
  done
fi
for f in zimage-e2e-golden.safetensors zimage_e2e_0.png zimage-e2e-workflow.json; do
  if [ -f "tests/data/zimage/e2e/$f" ]; then  # the committed copy: the same bytes?
    cmp -s "tests/data/zimage/e2e/$f" "$OUT/zimage-e2e/$f" && echo "$f: same as committed" ||
      echo "$f: DIFFERS from the committed copy"
  fi
done
exit $rc
