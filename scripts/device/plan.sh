# The plan against the run on the GPU in one device call: build headroom and the workflow tests
# with CUDA, then plan_cuda_test (full-size SD1.5 512x512 and SDXL 1024x1024 random f16
# checkpoints, planned and run under no budget and under budgets that stream and tile; the
# predicted allocator-level peak within 2 % of the measured one), the other GPU workflow tests
# (ComfyUI's end-to-end cases on CUDA) and the plan coverage suite. Logs to $OUT; carry .debs.
device_configure
device_build build.log headroom hr_tests_workflow
./build-dev/tests/hr_tests_workflow --gtest_filter='PlanCuda*' > "$OUT/plan_cuda.log" 2>&1
grep -E "budget|node|OK \]|FAILED|Failure|SKIPPED|PASSED" "$OUT/plan_cuda.log" | head -80
./build-dev/tests/hr_tests_workflow --gtest_filter='-PlanCuda*' > "$OUT/workflow.log" 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED|tests ran" "$OUT/workflow.log" | head -20
