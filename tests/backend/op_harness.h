// The op-test harness: the list of op cases at SD-relevant configurations and a runner that
// checks one case on any Backend against an oracle (the float64 reference or another backend).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "op_reference.h"

namespace hr::test {

// How the runner draws one input's values.
struct InputRange {
  double lo = -1.0, hi = 1.0;  // uniform in [lo, hi); integer inputs draw integers in [lo, hi)
  bool fixed_dtype = false;    // keep the declared dtype whatever dtype is under test
};

// Note [dtype under test]
// A case declares float inputs as F32; the runner replaces them by the dtype under test
// (unless their InputRange is fixed_dtype). Integer inputs (ids, casts from i32) keep their
// dtype. TIMESTEP_EMBEDDING's output dtype (params.dtype) also follows the dtype under test.
// Cases with sweep = false run only at F32 (their dtypes are all fixed, e.g. casts from i32).
struct OpCase {
  std::string name;  // unique, [A-Za-z0-9_] (used as a test name)
  OpKind kind = OpKind::COPY;
  OpParams params;
  std::vector<TensorDesc> inputs;
  // Tolerances on ||out - ref|| / ||ref|| per dtype under test.
  double tol_f32 = 1e-5, tol_f16 = 1e-3, tol_bf16 = 1e-2;
  std::vector<InputRange> ranges;  // per input; missing entries use the default range
  bool sweep = true;

  double tol(DType dtype) const;
  InputRange range(size_t input) const;
  // The dtypes this case runs at: F32, F16, BF16 (or only F32 without sweep).
  std::vector<DType> dtypes() const;

  // Builder helpers for op_cases().
  OpCase& with_range(size_t input, double lo, double hi);
  OpCase& with_fixed(size_t input);
  OpCase& with_tol(double f32, double f16, double bf16);
};

// Every case (at least one per OpKind).
std::vector<OpCase> op_cases();

// Computes the expected output for inputs whose values are exactly their stored values.
using OpOracle =
    std::function<Result<RefTensor>(OpKind, const OpParams&, std::span<const RefTensor>)>;
// The float64 reference (op_reference).
OpOracle reference_oracle();
// Runs the op on `backend` in f32 (float inputs widened exactly; TIMESTEP_EMBEDDING computed
// in f32): lets a GPU test check against the CPU backend. `backend` must outlive the oracle.
OpOracle backend_oracle(Backend& backend);

struct OpResult {
  bool skipped = false;  // backend.op_supported is false for these dtypes
  bool pass = false;
  double rel_error = 0.0;  // ||out - ref|| / ||ref||
  double max_abs_error = 0.0;
  double tol = 0.0;
  Status status;        // non-OK when something failed before the comparison
  std::string message;  // one line: what ran, and why it failed or was skipped
};

// Runs case `c` at `dtype` on `backend`: draws inputs from `seed` (and the case name), rounds
// them to their dtypes, copies them to device buffers from an Allocator, poisons the output
// and workspace (0xFF bytes) and a guard zone after the output, runs op_run, copies back and
// compares with `oracle` (the float64 reference when empty). Also fails when op_infer disagrees
// with the oracle's shape, when the guard zone or an input was written, or on non-finite output.
OpResult op_case_run(Backend& backend, const OpCase& c, DType dtype, uint64_t seed,
                     const OpOracle& oracle = {});

// Runs case `c` on `test` and checks it against `reference` (e.g. CUDA against CPU).
OpResult op_case_compare(Backend& reference, Backend& test, const OpCase& c, DType dtype,
                         uint64_t seed);

// --- What the per-backend suites (op_cpu_test, op_cuda_test) parameterise over --------------

// HR_OP_SEED in the environment replays or varies the inputs; the default keeps CI stable.
uint64_t op_seed();
// op_cases(), built once.
const std::vector<OpCase>& harness_cases();
// One test parameter per (case, dtype under test).
struct CaseParam {
  size_t index;  // into harness_cases()
  DType dtype;
};
std::vector<CaseParam> case_params();
// The parameter's test name, "<case>_<dtype>".
std::string case_param_name(const CaseParam& p);
// The CPU backend, created once.
Backend& harness_cpu();

// Runs an op once on `backend` with the given inputs (values exactly representable in their
// dtypes) and returns its output as doubles; the building block of the runner and of
// backend_oracle. Exposed for tests that need a raw op_run Status (e.g. ids out of range).
Result<RefTensor> op_execute(Backend& backend, OpKind kind, const OpParams& params,
                             std::span<const RefTensor> inputs);

}  // namespace hr::test
