# Qwen tokenizer golden (issue 40): transformers' Qwen2Tokenizer and Qwen2TokenizerFast on the
# corpus of tests/data/qwen/make_tokenizer_golden.py, from data/qwen_tokenizer (local files only);
# writes $OUT/tokenizer_ids.json: the committed tests/data/qwen/tokenizer_ids.json, checked by
# tests/models/qwen_tokenizer_golden_test.cpp, came from this (transformers 5.17.0). Needs python3
# with transformers and tokenizers. Builds nothing.
timeout 300 python3 tests/data/qwen/make_tokenizer_golden.py --vocab-dir data/qwen_tokenizer \
  --out "$OUT/tokenizer_ids.json" > "$OUT/qwentok.log" 2>&1
rc=$?
tail -20 "$OUT/qwentok.log"
exit $rc
