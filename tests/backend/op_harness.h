// The op-test harness: the list of op cases at SD-relevant configurations and a runner that
// checks one case on any Backend against an oracle (the float64 reference or another backend).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "op_reference.h"
#include "test_gpu.h"

namespace hr::test {

// Note [harness tolerances]
// A result passes when both of these hold (error_within):
//   relative L2    ||out - ref|| / ||ref||      <= Tolerance::rel_l2   (the typical error)
//   relative max   max |out - ref| / max |ref|  <= Tolerance::rel_max  (the largest single error)
// L2 alone lets one wrong element in 16k through at bf16 when it is off by half a typical output
// (it adds 0.5/128 = 3.9e-3 to the relative L2); the max bound catches it, since max |ref| is
// only ~4x the RMS of random outputs. The
// bounds come from what a correct kernel does with inputs exactly representable in the dtype:
// f32 accumulation, then rounding to the output dtype, which leaves a relative error of at most
// u per element (unit roundoff: f16 2^-11 = 4.9e-4, bf16 2^-8 = 3.9e-3) and an RMS of 0.42 u
// over random values. Kernels round once (GEMMs, norms, element-wise), twice (a convolution's
// result, then its bias epilogue) or also round an intermediate (attention's probabilities), so
// a correct f16 kernel shows 2e-4 to 3e-4 relative L2 and at most ~2u = 1e-3 relative max; bf16
// 1.7e-3 to 2.4e-3 and ~8e-3. The defaults (default_tolerance) sit 2-5x above that:
//          rel_l2   rel_max
//   f32    1e-5     2e-5     (summation order, exp/erf approximations)
//   f16    1e-3     1.5e-3   (3 u)
//   bf16   5e-3     1e-2     (2.5 u)
// A dropped bias or a wrong eps (a ~1e-2 relative shift of the result) fails L2 at every dtype;
// one element off by a typical output's size fails max at every dtype. OpHarness tests in
// op_harness_test.cpp check both claims, and that rounding the exact result passes.
struct Tolerance {
  double rel_l2 = 0.0;
  double rel_max = 0.0;
};
Tolerance default_tolerance(DType dtype);

// How far `out` is from `ref` (same length).
struct ErrorStats {
  double rel_l2 = 0.0;   // ||out - ref|| / ||ref|| (||out - ref|| when ref is all zeros)
  double max_abs = 0.0;  // max |out - ref|
  double ref_max = 0.0;  // max |ref|
  double rel_max = 0.0;  // max_abs / ref_max (max_abs when ref is all zeros)
  int64_t nonfinite = 0;  // non-finite outputs (then rel_l2 and rel_max are infinite)
  int64_t worst = -1;     // flat index of the first non-finite output, else of the largest error
};
ErrorStats error_stats(std::span<const double> out, std::span<const double> ref);
bool error_within(const ErrorStats& e, const Tolerance& t);
// "rel L2 3.1e-4 (tol 1e-3), max abs 2e-3 = 4.1e-4 of max |ref| 4.9 (tol 1.5e-3), worst at flat
// 17: out 1.25 ref 1.2510"
std::string error_str(const ErrorStats& e, const Tolerance& t, std::span<const double> out,
                      std::span<const double> ref);

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
//
// Note [checked rows]
// A full-size case may have the oracle compute only some rows: with check_rows > 0, the oracle
// gets the inputs listed in row_inputs cut to check_rows evenly spaced indices of their dim 1
// (the other inputs whole), and only those rows of the output are compared. This holds for ops
// whose output row i depends only on row i of those inputs: ATTENTION's queries (input 0),
// LINEAR's rows (input 0 and a full-shape add_input term), row-wise norms and GEGLU.
struct OpCase {
  std::string name;  // unique, [A-Za-z0-9_] (used as a test name)
  OpKind kind = OpKind::COPY;
  OpParams params;
  std::vector<TensorDesc> inputs;
  // Note [harness tolerances]; with_tol and with_max_tol change them per case.
  Tolerance tol_f32 = default_tolerance(DType::F32);
  Tolerance tol_f16 = default_tolerance(DType::F16);
  Tolerance tol_bf16 = default_tolerance(DType::BF16);
  std::vector<InputRange> ranges;  // per input; missing entries use the default range
  bool sweep = true;
  int64_t check_rows = 0;           // Note [checked rows]; 0: every row
  std::vector<size_t> row_inputs;  // the inputs cut to the checked rows

  Tolerance tol(DType dtype) const;
  InputRange range(size_t input) const;
  // The dtypes this case runs at: F32, F16, BF16 (or only F32 without sweep).
  std::vector<DType> dtypes() const;

  // Builder helpers for op_cases().
  OpCase& with_range(size_t input, double lo, double hi);
  OpCase& with_fixed(size_t input);
  // Relative L2 tolerances; a 0 (exact ops) also makes that dtype's max tolerance 0.
  OpCase& with_tol(double f32, double f16, double bf16);
  OpCase& with_max_tol(double f32, double f16, double bf16);
  OpCase& with_checked_rows(int64_t rows, std::vector<size_t> inputs);
};

// A case with default tolerances: `name`, `kind`, `inputs` and `p`.
OpCase make_case(std::string name, OpKind kind, std::vector<TensorDesc> inputs, OpParams p = {});

// Every case (at least one per OpKind).
std::vector<OpCase> op_cases();
// The transformer ops' cases (RMS_NORM, ROPE; op_cases_transformer.cpp), part of op_cases().
void add_transformer_cases(std::vector<OpCase>& v);

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
  bool pass = false;     // error_within(error, tol)
  ErrorStats error;
  Tolerance tol;
  uint64_t seed = 0;
  Status status;        // non-OK when something failed before the comparison
  std::string message;  // one line: what ran, the errors and the seed, or why it was skipped
};

// Runs case `c` at `dtype` on `backend`: draws inputs from `seed` (and the case name), rounds
// them to their dtypes, copies them to device buffers from an Allocator, poisons the output
// and workspace (0xFF bytes) and a guard zone after the output, runs op_run, copies back and
// compares with `oracle` (the float64 reference when empty) under Note [harness tolerances] and
// Note [checked rows]. Also fails when op_infer disagrees with the oracle's shape, when the guard
// zone or an input was written, or on non-finite output.
OpResult op_case_run(Backend& backend, const OpCase& c, DType dtype, uint64_t seed,
                     const OpOracle& oracle = {});

// Runs case `c` on `test` and checks it against `reference` (e.g. CUDA against CPU).
OpResult op_case_compare(Backend& reference, Backend& test, const OpCase& c, DType dtype,
                         uint64_t seed);

// --- What the per-backend suites (op_cpu_test, op_cuda_test) parameterise over --------------

// Note [test seeds]: the seed of this process's random inputs, fresh per run (printed once at
// the start and in every result message); HEADROOM_TEST_SEED=N replays a run.
uint64_t op_seed();
// The seed named by HEADROOM_TEST_SEED (or the older HR_OP_SEED) if set and valid, else
// `fresh`. Exposed for its test.
uint64_t seed_choose(const char* env_value, uint64_t fresh);
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
// How gtest prints it ("where GetParam() = ...").
void PrintTo(const CaseParam& p, std::ostream* os);
// The CPU backend, created once.
Backend& harness_cpu();
// The CUDA backend for device 0, created once; null with the reason where there is none.
struct HarnessCuda {
  std::unique_ptr<Backend> backend;
  std::string why_not;
};
HarnessCuda& harness_cuda();

// Runs an op once on `backend` with the given inputs (values exactly representable in their
// dtypes) and returns its output as doubles; the building block of the runner and of
// backend_oracle. Exposed for tests that need a raw op_run Status (e.g. ids out of range).
Result<RefTensor> op_execute(Backend& backend, OpKind kind, const OpParams& params,
                             std::span<const RefTensor> inputs);

}  // namespace hr::test

// Declares `Backend& name` as the harness's CUDA backend in a test body, or skips the test (fails
// it where a GPU is required, Note [required GPU] in test_gpu.h) with the CUDA error.
#define HR_HARNESS_CUDA(name)                                                              \
  HR_SKIP_UNLESS_GPU(::hr::test::harness_cuda().backend != nullptr,                        \
                     ::hr::test::harness_cuda().why_not);                                  \
  ::hr::Backend& name = *::hr::test::harness_cuda().backend
