# The server on the GPU (issue 16): the server tests with the worker on CUDA (the tiny checkpoint
# in f16), and the npm ComfyUI client flow against `headroom serve --device cuda` when Node.js is
# there (carry tests/client/node_modules). Logs go to $OUT (or ./device-logs); carry .debs.
device_configure
ninja -C build-dev -j"$(nproc)" headroom hr_tests_server > "$OUT/build_server.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build_server.log" | head -40; exit 1; }
echo "== server tests with the worker on cuda"
HEADROOM_SERVER_TEST_DEVICE=cuda ./build-dev/tests/hr_tests_server \
  --gtest_filter='ServerTest.*:PreviewTest.*:TinyBudgetTest.*:ViewTest.*:*Levels*' > "$OUT/server_cuda.log" 2>&1
grep -E "^\[  (PASSED|FAILED)|OK \]|FAILED \]|Failure" "$OUT/server_cuda.log" | tail -30
if command -v node > /dev/null && [ -d tests/client/node_modules ]; then
  echo "== npm ComfyUI client against headroom serve --device cuda"
  HEADROOM_CLIENT_DEVICE=cuda node tests/client/comfy_client_flow.test.mjs ./build-dev/headroom 2>&1 |
    grep -E "^\[client\]|listening" | tee "$OUT/npm_client_cuda.log"
else
  echo "no node or tests/client/node_modules here: npm client run skipped"
fi
