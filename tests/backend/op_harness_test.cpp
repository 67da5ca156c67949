// The op harness's own checks, on the CPU: the error measures and Note [harness tolerances] (a
// correct kernel's rounding passes at f16 and bf16; a dropped bias and one wrong element in 16k
// fail), Note [test seeds] and Note [required GPU].
#include "op_harness.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "test_gpu.h"

namespace hr::test {
namespace {

TEST(OpHarnessErrors, Measures) {
  const std::vector<double> out{1.0, 2.0, 3.0}, ref{1.0, 2.0, 4.0};
  ErrorStats e = error_stats(out, ref);
  EXPECT_DOUBLE_EQ(e.rel_l2, 1.0 / std::sqrt(21.0));
  EXPECT_DOUBLE_EQ(e.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(e.ref_max, 4.0);
  EXPECT_DOUBLE_EQ(e.rel_max, 0.25);
  EXPECT_EQ(e.worst, 2);
  EXPECT_TRUE(error_within(e, {0.3, 0.25}));
  EXPECT_FALSE(error_within(e, {0.2, 0.25}));  // L2 over
  EXPECT_FALSE(error_within(e, {0.3, 0.2}));   // max over

  const std::vector<double> nan_out{1.0, NAN, 4.0};
  ErrorStats n = error_stats(nan_out, ref);
  EXPECT_EQ(n.nonfinite, 1);
  EXPECT_EQ(n.worst, 1);
  EXPECT_FALSE(error_within(n, {1e9, 1e9}));

  const std::vector<double> zeros{0.0, 0.0}, small{0.0, 1e-3};
  EXPECT_DOUBLE_EQ(error_stats(small, zeros).rel_max, 1e-3);  // absolute when ref is all zeros
  EXPECT_TRUE(error_within(error_stats(zeros, zeros), {0.0, 0.0}));
}

// A linear layer's 16,384 outputs y = x w^T + b (x[128, 256], w[128, 256], exact in `dtype`)
// computed in float64, with a bias of 1e-2 of the product's RMS: the shift a dropped bias or a
// wrong eps makes in a model's outputs.
struct LinearOutputs {
  std::vector<double> product;  // x w^T
  std::vector<double> bias;     // per output channel
  std::vector<double> exact;    // x w^T + b
  double rms = 0.0;             // of exact
};

LinearOutputs linear_outputs(DType dtype, uint64_t seed) {
  constexpr int kRows = 128, kCols = 128, kDepth = 256;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  auto draw = [&](size_t n, double scale) {
    std::vector<double> v(n);
    for (double& x : v) x = dtype_round(scale * unit(gen), dtype);
    return v;
  };
  const std::vector<double> x = draw(kRows * kDepth, 1.7);
  const std::vector<double> w = draw(kCols * kDepth, std::sqrt(3.0 / kDepth));
  LinearOutputs o;
  o.product.assign(kRows * kCols, 0.0);
  double sum2 = 0.0;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      double s = 0.0;
      for (int k = 0; k < kDepth; ++k) s += x[r * kDepth + k] * w[c * kDepth + k];
      o.product[r * kCols + c] = s;
      sum2 += s * s;
    }
  const double product_rms = std::sqrt(sum2 / double(o.product.size()));
  o.bias = draw(kCols, 1e-2 * product_rms * std::sqrt(3.0));  // RMS 1e-2 of the product's
  o.exact = o.product;
  sum2 = 0.0;
  for (size_t i = 0; i < o.exact.size(); ++i) {
    o.exact[i] += o.bias[i % kCols];
    sum2 += o.exact[i] * o.exact[i];
  }
  o.rms = std::sqrt(sum2 / double(o.exact.size()));
  return o;
}

std::vector<double> rounded(std::vector<double> v, DType t) {
  for (double& x : v) x = dtype_round(x, t);
  return v;
}

std::string describe(const ErrorStats& e, const Tolerance& t, const std::vector<double>& out,
                     const std::vector<double>& ref) {
  return error_str(e, t, out, ref) + fmt::format("; seed {}", op_seed());
}

// Note [harness tolerances]: what a correct f16/bf16 kernel does passes the defaults: rounding
// the exact result once (a GEMM with the bias in its epilogue), or rounding the product and
// then the biased sum (a convolution and its bias epilogue).
TEST(OpHarnessTolerances, CorrectRoundingPasses) {
  for (DType t : {DType::F16, DType::BF16}) {
    const LinearOutputs o = linear_outputs(t, op_seed());
    const Tolerance tol = default_tolerance(t);
    const std::vector<double> once = rounded(o.exact, t);
    ErrorStats e1 = error_stats(once, o.exact);
    EXPECT_TRUE(error_within(e1, tol))
        << dtype_name(t) << " once: " << describe(e1, tol, once, o.exact);
    std::vector<double> twice = rounded(o.product, t);
    for (size_t i = 0; i < twice.size(); ++i) twice[i] += o.bias[i % o.bias.size()];
    twice = rounded(twice, t);
    ErrorStats e2 = error_stats(twice, o.exact);
    EXPECT_TRUE(error_within(e2, tol))
        << dtype_name(t) << " twice: " << describe(e2, tol, twice, o.exact);
    // The margin: a correct kernel stays well inside the tolerance, not at its edge.
    EXPECT_LT(e2.rel_l2, 0.6 * tol.rel_l2) << dtype_name(t);
    EXPECT_LT(e2.rel_max, 0.85 * tol.rel_max) << dtype_name(t);
  }
}

// A kernel that drops the bias (a ~1e-2 relative shift) fails at f16 and bf16.
TEST(OpHarnessTolerances, DroppedBiasFails) {
  for (DType t : {DType::F16, DType::BF16}) {
    const LinearOutputs o = linear_outputs(t, op_seed());
    const Tolerance tol = default_tolerance(t);
    const std::vector<double> out = rounded(o.product, t);
    ErrorStats e = error_stats(out, o.exact);
    EXPECT_FALSE(error_within(e, tol)) << dtype_name(t) << ": " << describe(e, tol, out, o.exact);
    EXPECT_GT(e.rel_l2, 1.5 * tol.rel_l2) << dtype_name(t) << ": caught by L2, with margin";
  }
}

// One element in 16,384 wrong by half a typical output fails at f16 and bf16; at bf16 its share
// of the L2 error (0.5 / 128 = 3.9e-3) is within the L2 tolerance: the max bound catches it.
TEST(OpHarnessTolerances, OneWrongElementIn16kFails) {
  for (DType t : {DType::F16, DType::BF16}) {
    const LinearOutputs o = linear_outputs(t, op_seed());
    ASSERT_EQ(o.exact.size(), 16384u);
    const Tolerance tol = default_tolerance(t);
    std::vector<double> out = rounded(o.exact, t);
    out[9001] = dtype_round(out[9001] + 0.5 * o.rms, t);
    ErrorStats e = error_stats(out, o.exact);
    EXPECT_FALSE(error_within(e, tol)) << dtype_name(t) << ": " << describe(e, tol, out, o.exact);
    EXPECT_GT(e.rel_max, 4.0 * tol.rel_max) << dtype_name(t) << ": caught by max, with margin";
    EXPECT_EQ(e.worst, 9001);
    if (t == DType::BF16) {
      EXPECT_LE(e.rel_l2, tol.rel_l2) << "L2 alone would have passed it";
    }

    // A skipped write (an element of typical size left at 0) fails too.
    std::vector<double> skipped = rounded(o.exact, t);
    size_t typical = 0;
    while (std::abs(o.exact[typical]) < o.rms) ++typical;
    skipped[typical] = 0.0;
    EXPECT_FALSE(error_within(error_stats(skipped, o.exact), tol)) << dtype_name(t);
  }
}

// Note [test seeds]
TEST(TestSeeds, EnvironmentOverridesAFreshSeed) {
  EXPECT_EQ(seed_choose(nullptr, 5), 5u);
  EXPECT_EQ(seed_choose("", 5), 5u);
  EXPECT_EQ(seed_choose("123", 5), 123u);
  EXPECT_EQ(seed_choose("0x10", 5), 16u);
  EXPECT_EQ(seed_choose("18446744073709551615", 5), 18446744073709551615ull);
  EXPECT_EQ(seed_choose("12abc", 5), 5u);  // not a number: the fresh seed
  EXPECT_EQ(op_seed(), op_seed());         // one seed per process
}

// Note [required GPU]
TEST(RequiredGpu, SwitchDecidesSkipOrFail) {
  EXPECT_EQ(no_gpu_action(nullptr, nullptr), NoGpu::SKIP);
  EXPECT_EQ(no_gpu_action("", nullptr), NoGpu::SKIP);
  EXPECT_EQ(no_gpu_action("0", nullptr), NoGpu::SKIP);
  EXPECT_EQ(no_gpu_action("1", nullptr), NoGpu::FAIL);
  EXPECT_EQ(no_gpu_action("yes", nullptr), NoGpu::FAIL);
  EXPECT_EQ(no_gpu_action(nullptr, "1"), NoGpu::FAIL);  // the older name
  EXPECT_EQ(no_gpu_action("0", "0"), NoGpu::SKIP);
}

void gpu_test_without_device() { HR_SKIP_UNLESS_GPU(false, "cudaGetDeviceCount: driver too old"); }

// Sets an environment variable for one scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(RequiredGpu, MissingDeviceFailsWithTheCudaError) {
  ScopedEnv expect("HEADROOM_EXPECT_GPU", nullptr);
  ScopedEnv require("HEADROOM_REQUIRE_GPU", "1");
  EXPECT_FATAL_FAILURE(gpu_test_without_device(), "cudaGetDeviceCount: driver too old");
}

}  // namespace
}  // namespace hr::test
