# T5 tokenizer golden (issue 39): the reference libraries and ComfyUI's own T5XXLTokenizer on the
# corpus of tests/data/t5/make_t5_golden.py; writes $OUT/t5_tokens_golden.json, to be committed as
# tests/data/t5/t5_tokens_golden.json (T5TokenizerGolden.MatchesReferenceLibraries fails until
# then). Needs python3 with tokenizers, transformers and torch, and ComfyUI's files as
# .devdata/comfyui.tar.xz (comfyui/comfy/...; carry .devdata). Builds nothing.
if [ ! -f .devdata/comfyui.tar.xz ]; then
  echo "t5tok: .devdata/comfyui.tar.xz is missing (carry .devdata)"
  exit 1
fi
mkdir -p /tmp/comfy-src && tar -C /tmp/comfy-src -xJf .devdata/comfyui.tar.xz || exit 1
timeout 120 python3 tests/data/t5/make_t5_golden.py /tmp/comfy-src/comfyui \
  --out "$OUT/t5_tokens_golden.json" > "$OUT/t5tok.log" 2>&1
rc=$?
tail -5 "$OUT/t5tok.log"
exit $rc
