# ComfyUI's own Flux workflow on the tiny single-file checkpoint (issue 39 item 5): remakes the
# end-to-end golden of tests/data/flux/e2e with the real CLIP and T5 tokenizers, on the CPU in
# float32. Writes $OUT/flux-e2e/{tiny-flux.safetensors, flux-e2e-golden.safetensors,
# flux_e2e_0.png, flux-e2e-workflow.json} (commit them under tests/data/flux/e2e) and the log.
# Needs python3 with torch >= 2, transformers and tokenizers, and ComfyUI's files as
# .devdata/comfyui.tar.xz (carry .devdata). Builds nothing.
#   scripts/device.sh flux-e2e:prepare   (here, before the device call) remakes
#     .devdata/comfyui.tar.xz from a ComfyUI git directory, COMFYUI_GIT (a bare clone or mirror
#     holding commit a125cd84), with the files of scripts/device/comfyui-files.txt.
if [ "${1:-}" = prepare ]; then
  if [ -z "${COMFYUI_GIT:-}" ]; then
    echo "flux-e2e prepare: set COMFYUI_GIT to a ComfyUI git directory holding a125cd84"
    exit 1
  fi
  mkdir -p .devdata && set -o pipefail
  grep -v '^#' scripts/device/comfyui-files.txt |
    xargs git --git-dir="$COMFYUI_GIT" archive --prefix=comfyui/ a125cd84b054a57729b5eecab930ca9408719832 -- |
    xz -9e > .devdata/comfyui.tar.xz || exit 1
  echo "flux-e2e prepare: .devdata/comfyui.tar.xz $(stat -c %s .devdata/comfyui.tar.xz) bytes," \
    "$(tar -tJf .devdata/comfyui.tar.xz | grep -vc '/$') files"
  exit 0
fi
comfyui_unpack flux-e2e || exit 1  # scripts/device/env.sh
mkdir -p "$OUT/flux-e2e"
timeout 300 python3 tests/data/flux/e2e/make_flux_e2e_golden.py --comfy /tmp/comfy-src/comfyui \
  --out "$OUT/flux-e2e" > "$OUT/flux-e2e.log" 2>&1
rc=$?
tail -6 "$OUT/flux-e2e.log"
[ $rc = 0 ] && python3 tests/data/flux/e2e/make_flux_e2e_golden.py --checkpoint-from-golden \
  "$OUT/flux-e2e/flux-e2e-golden.safetensors" /tmp/tiny-flux-again.safetensors || rc=1
for f in tiny-flux.safetensors flux-e2e-golden.safetensors flux_e2e_0.png flux-e2e-workflow.json; do
  if [ -f "tests/data/flux/e2e/$f" ]; then  # the committed copy: the same bytes?
    cmp -s "tests/data/flux/e2e/$f" "$OUT/flux-e2e/$f" && echo "$f: same as committed" ||
      echo "$f: DIFFERS from the committed copy"
  fi
done
exit $rc
