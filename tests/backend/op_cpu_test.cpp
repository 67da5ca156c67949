// Runs every op case of the harness on the CPU backend against the float64 reference, plus
// op_infer error checks, the embedding range check, batch invariance, and tests that the harness
// catches faults.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <set>

#include "backend/backend.h"
#include "op_harness.h"

namespace hr::test {
namespace {

class OpCpuTest : public ::testing::TestWithParam<CaseParam> {};

TEST_P(OpCpuTest, MatchesReference) {
  const OpCase& c = harness_cases()[GetParam().index];
  OpResult r = op_case_run(harness_cpu(), c, GetParam().dtype, op_seed());
  if (r.skipped) GTEST_SKIP() << r.message;
  std::cout << "  " << r.message << "\n";
  ASSERT_TRUE(r.status.ok()) << r.message;
  EXPECT_TRUE(r.pass) << r.message;
}

INSTANTIATE_TEST_SUITE_P(Cases, OpCpuTest, ::testing::ValuesIn(case_params()),
                         [](const ::testing::TestParamInfo<CaseParam>& info) {
                           return case_param_name(info.param);
                         });

TEST(OpCases, CoverEveryOpKind) {
  std::set<OpKind> seen;
  for (const OpCase& c : harness_cases()) seen.insert(c.kind);
  for (int k = 0; k < int(OpKind::COUNT_); ++k)
    EXPECT_TRUE(seen.count(OpKind(k))) << "no op case for " << op_name(OpKind(k));
}

TEST(OpCases, NamesAreUniqueIdentifiers) {
  std::set<std::string> names;
  for (const OpCase& c : harness_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
    for (char ch : c.name)
      EXPECT_TRUE(std::isalnum(uint8_t(ch)) || ch == '_') << "bad name " << c.name;
  }
}

// --- op_infer errors --------------------------------------------------------------------------

void expect_infer_error(OpKind kind, const OpParams& p, std::vector<TensorDesc> in) {
  Result<TensorDesc> r = op_infer(kind, p, in);
  ASSERT_FALSE(r.ok()) << op_name(kind) << " accepted bad inputs";
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT) << r.status().str();
  EXPECT_NE(r.status().message().find(op_name(kind)), std::string::npos)
      << "message does not name the op: " << r.status().message();
}

TensorDesc f32(Shape s) { return TensorDesc{DType::F32, s}; }

TEST(OpInfer, RejectsLinearShapeMismatch) {
  expect_infer_error(OpKind::LINEAR, {}, {f32({2, 64}), f32({32, 48})});
  expect_infer_error(OpKind::LINEAR, {}, {f32({2, 64}), f32({32, 64}), f32({31})});
}

TEST(OpInfer, RejectsConvChannelMismatch) {
  expect_infer_error(OpKind::CONV2D, {}, {f32({1, 8, 8, 8}), f32({16, 4, 3, 3})});
  OpParams g;
  g.groups = 3;
  expect_infer_error(OpKind::CONV2D, g, {f32({1, 8, 8, 8}), f32({16, 4, 3, 3})});
  expect_infer_error(OpKind::CONV2D, {},
                     {f32({1, 8, 2, 2}), f32({16, 8, 3, 3})});  // kernel > input
}

TEST(OpInfer, RejectsBadBroadcast) {
  expect_infer_error(OpKind::ADD, {}, {f32({2, 3}), f32({4, 3})});
  expect_infer_error(OpKind::MUL, {}, {f32({2, 32, 8, 8}), f32({16, 1, 1})});
  OpParams tb;
  expect_infer_error(OpKind::MATMUL, tb, {f32({2, 4, 8}), f32({3, 8, 5})});
  expect_infer_error(OpKind::MATMUL, tb, {f32({4, 8}), f32({7, 5})});
}

TEST(OpInfer, RejectsBadPermute) {
  OpParams p;
  p.perm[0] = 0;
  p.perm[1] = 0;
  p.perm[2] = 1;
  expect_infer_error(OpKind::PERMUTE, p, {f32({2, 3, 4})});
  p.perm[1] = 3;  // out of range for rank 3
  expect_infer_error(OpKind::PERMUTE, p, {f32({2, 3, 4})});
}

TEST(OpInfer, RejectsReshapeNumelMismatch) {
  OpParams p;
  p.shape = Shape{2, 63};
  expect_infer_error(OpKind::RESHAPE, p, {f32({2, 8, 8})});
}

TEST(OpInfer, RejectsFloatEmbeddingIds) {
  expect_infer_error(OpKind::EMBEDDING, {}, {f32({2, 77}), f32({1000, 64})});
}

TEST(OpInfer, RejectsConcatMismatch) {
  OpParams p;
  p.axis = 1;
  expect_infer_error(OpKind::CONCAT, p, {f32({2, 3, 4}), f32({2, 5, 5})});
  expect_infer_error(OpKind::CONCAT, p, {f32({2, 3, 4}), TensorDesc{DType::F16, Shape{2, 5, 4}}});
  expect_infer_error(OpKind::CONCAT, p, {f32({2, 3, 4})});
}

TEST(OpInfer, RejectsAttentionHeadMismatch) {
  OpParams p;
  p.heads = 3;
  expect_infer_error(OpKind::ATTENTION, p, {f32({1, 8, 64}), f32({1, 8, 64}), f32({1, 8, 64})});
  p.heads = 1;
  expect_infer_error(OpKind::ATTENTION, p, {f32({1, 8, 64}), f32({1, 9, 64}), f32({1, 8, 64})});
}

// --- backend-side checks ----------------------------------------------------------------------

TEST(OpRun, EmbeddingIdOutOfRangeIsAnError) {
  for (DType id_type : {DType::I32, DType::I64})
    for (double bad : {10.0, -1.0}) {
      RefTensor ids{TensorDesc{id_type, Shape{3}}, {0.0, bad, 2.0}};
      RefTensor table{f32({10, 4}), std::vector<double>(40, 0.5)};
      std::vector<RefTensor> in{ids, table};
      Result<RefTensor> r = op_execute(harness_cpu(), OpKind::EMBEDDING, OpParams{}, in);
      EXPECT_FALSE(r.ok()) << dtype_name(id_type) << " id " << bad << " was accepted";
    }
}

// Note [batch-invariant linear]: an entry of dim 0 comes out bit for bit the same alone as in a
// batch. 77 rows (SD's context tokens) put the first entry's last rows at the edge of a lone
// sgemm but inside a batched one; ATTENTION runs with more threads than heads, where its query
// chunk used to follow batch * heads.
RefTensor random_ref(Shape s, std::mt19937& gen) {
  RefTensor t{f32(s), std::vector<double>(size_t(s.numel()))};
  std::normal_distribution<float> nd;
  for (double& v : t.data) v = double(nd(gen));
  return t;
}

RefTensor entry_of(const RefTensor& t, int64_t i) {
  Shape s = t.desc.shape;
  const size_t n = size_t(t.desc.shape.numel() / s[0]);
  s.dims[0] = 1;
  return RefTensor{f32(s), std::vector<double>(t.data.begin() + ptrdiff_t(i * n),
                                               t.data.begin() + ptrdiff_t((i + 1) * n))};
}

void expect_batch_invariant(OpKind kind, const OpParams& p, std::vector<RefTensor> in,
                            std::vector<size_t> batched, const std::string& what) {
  Result<RefTensor> all = op_execute(harness_cpu(), kind, p, in);
  ASSERT_TRUE(all.ok()) << what << ": " << all.status().str();
  const int64_t entries = in[batched[0]].desc.shape[0];
  const size_t n = all->data.size() / size_t(entries);
  for (int64_t i = 0; i < entries; ++i) {
    std::vector<RefTensor> one = in;
    for (size_t b : batched) one[b] = entry_of(in[b], i);
    Result<RefTensor> alone = op_execute(harness_cpu(), kind, p, one);
    ASSERT_TRUE(alone.ok()) << what << ": " << alone.status().str();
    ASSERT_EQ(alone->data.size(), n) << what;
    size_t differ = 0;
    for (size_t j = 0; j < n; ++j) differ += alone->data[j] != all->data[size_t(i) * n + j];
    EXPECT_EQ(differ, 0u) << what << ": entry " << i << " alone differs from batched in "
                          << differ << " of " << n << " values";
  }
}

TEST(OpRun, BatchEntriesComputeAsAlone) {
  std::mt19937 gen(1234);
  OpParams none;
  expect_batch_invariant(OpKind::LINEAR, none,
                         {random_ref({3, 77, 48}, gen), random_ref({40, 48}, gen),
                          random_ref({40}, gen)},
                         {0}, "linear [3, 77, 48]");
  expect_batch_invariant(OpKind::LINEAR, none,
                         {random_ref({3, 48}, gen), random_ref({40, 48}, gen)}, {0},
                         "linear [3, 48]");
  expect_batch_invariant(OpKind::MATMUL, none,
                         {random_ref({3, 77, 16}, gen), random_ref({16, 24}, gen)}, {0},
                         "matmul [3, 77, 16] x [16, 24]");
  OpParams ap;
  ap.heads = 2;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(5);
  expect_batch_invariant(OpKind::ATTENTION, ap,
                         {random_ref({3, 80, 32}, gen), random_ref({3, 77, 32}, gen),
                          random_ref({3, 77, 32}, gen)},
                         {0, 1, 2}, "attention 2 heads, 5 threads");
  omp_set_num_threads(threads);
}

// --- the harness itself -----------------------------------------------------------------------

// Delegates to the CPU backend, then damages op results in one of a few ways.
class FaultyBackend final : public Backend {
 public:
  enum class Fault { SKIP_LAST, OVERRUN, PERTURB, CLOBBER_INPUT };
  FaultyBackend(Backend& inner, Fault fault) : inner_(inner), fault_(fault) {}

  DeviceInfo info() const override { return inner_.info(); }
  bool memory_is_host() const override { return inner_.memory_is_host(); }
  Result<void*> device_alloc(size_t b) override { return inner_.device_alloc(b); }
  void device_free(void* p) override { inner_.device_free(p); }
  Result<void*> host_alloc_pinned(size_t b) override { return inner_.host_alloc_pinned(b); }
  void host_free_pinned(void* p) override { inner_.host_free_pinned(p); }
  Stream* default_stream() override { return inner_.default_stream(); }
  Result<std::unique_ptr<Stream>> stream_create() override { return inner_.stream_create(); }
  Status stream_sync(Stream* s) override { return inner_.stream_sync(s); }
  Result<std::unique_ptr<Event>> event_create() override { return inner_.event_create(); }
  Status event_record(Event* e, Stream* s) override { return inner_.event_record(e, s); }
  Status stream_wait_event(Stream* s, Event* e) override { return inner_.stream_wait_event(s, e); }
  Status event_sync(Event* e) override { return inner_.event_sync(e); }
  Status copy_h2d(void* d, const void* s, size_t n, Stream* st) override {
    return inner_.copy_h2d(d, s, n, st);
  }
  Status copy_d2h(void* d, const void* s, size_t n, Stream* st) override {
    return inner_.copy_d2h(d, s, n, st);
  }
  Status copy_d2d(void* d, const void* s, size_t n, Stream* st) override {
    return inner_.copy_d2d(d, s, n, st);
  }
  Status memset_zero(void* d, size_t n, Stream* st) override {
    return inner_.memset_zero(d, n, st);
  }
  bool op_supported(OpKind k, DType t) const override { return inner_.op_supported(k, t); }
  size_t op_workspace(OpKind k, const OpParams& p, std::span<const TensorDesc> in,
                      const TensorDesc& out) const override {
    return inner_.op_workspace(k, p, in, out);
  }

  Status op_run(const OpCall& call, Stream* s) override {
    if (fault_ == Fault::SKIP_LAST) {
      // Keep the last element as it was before the op (poison).
      size_t es = dtype_size(call.output.desc.dtype), n = call.output.desc.bytes();
      std::vector<uint8_t> keep(es);
      std::memcpy(keep.data(), static_cast<uint8_t*>(call.output.data) + n - es, es);
      HR_TRY(inner_.op_run(call, s));
      std::memcpy(static_cast<uint8_t*>(call.output.data) + n - es, keep.data(), es);
      return Status();
    }
    HR_TRY(inner_.op_run(call, s));
    uint8_t* out = static_cast<uint8_t*>(call.output.data);
    switch (fault_) {
      case Fault::OVERRUN:
        out[call.output.desc.bytes()] = 0;
        break;
      case Fault::PERTURB:  // a 1e-4 relative error: ten times the f32 tolerance
        for (int64_t i = 0; i < call.output.desc.numel(); ++i)
          call.output.as<float>()[i] *= 1.0001f;
        break;
      case Fault::CLOBBER_INPUT:
        static_cast<uint8_t*>(call.inputs[0].data)[0] ^= 1;
        break;
      default:
        break;
    }
    return Status();
  }

 private:
  Backend& inner_;
  Fault fault_;
};

OpCase small_add_case() {
  OpCase c;
  c.name = "faulty_add";
  c.kind = OpKind::ADD;
  c.inputs = {f32({4, 16}), f32({16})};
  return c;
}

TEST(OpHarness, CatchesFaults) {
  ASSERT_TRUE(harness_cpu().memory_is_host()) << "the fault injector writes device memory directly";
  OpCase c = small_add_case();
  OpResult good = op_case_run(harness_cpu(), c, DType::F32, 1);
  ASSERT_TRUE(good.pass) << good.message;

  using F = FaultyBackend::Fault;
  for (F fault : {F::SKIP_LAST, F::OVERRUN, F::PERTURB, F::CLOBBER_INPUT}) {
    FaultyBackend bad(harness_cpu(), fault);
    OpResult r = op_case_run(bad, c, DType::F32, 1);
    EXPECT_FALSE(r.pass) << "fault " << int(fault) << " not caught: " << r.message;
  }
}

TEST(OpHarness, CompareAgainstBackendOracle) {
  // The CPU backend checked against itself through the backend oracle: the path a GPU test takes.
  const std::set<std::string> some{"conv3x3_stride2_asym_pad", "attention_d40_cross77",
                                   "timestep_cos_sin_320", "cast_to_f16", "embedding_i64_tokens"};
  for (const OpCase& c : harness_cases()) {
    if (!some.count(c.name)) continue;
    OpResult r = op_case_compare(harness_cpu(), harness_cpu(), c, DType::F32, op_seed());
    if (r.skipped) continue;
    ASSERT_TRUE(r.status.ok()) << r.message;
    EXPECT_EQ(r.error.rel_l2, 0.0) << r.message;
    EXPECT_EQ(r.error.max_abs, 0.0) << r.message;
  }
}

// Note [checked rows]: the oracle computes only some rows (dim 1) of the inputs named; the runner
// compares just those rows, and still catches a fault in them.
TEST(OpHarness, CheckedRows) {
  OpParams ap;
  ap.heads = 2;
  OpCase att;
  att.name = "checked_attention";
  att.kind = OpKind::ATTENTION;
  att.params = ap;
  att.inputs = {f32({2, 50, 80}), f32({2, 30, 80}), f32({2, 30, 80})};
  att.with_checked_rows(7, {0});
  OpResult r = op_case_run(harness_cpu(), att, DType::F32, op_seed());
  ASSERT_TRUE(r.status.ok()) << r.message;
  EXPECT_TRUE(r.pass) << r.message;
  EXPECT_NE(r.message.find("7 of 50 rows checked"), std::string::npos) << r.message;

  OpParams lp;
  lp.add_input = true;
  OpCase lin;
  lin.name = "checked_linear_residual";
  lin.kind = OpKind::LINEAR;
  lin.params = lp;
  lin.inputs = {f32({2, 40, 16}), f32({24, 16}), f32({24}), f32({2, 40, 24})};
  lin.with_checked_rows(5, {0, 3});
  r = op_case_run(harness_cpu(), lin, DType::F32, op_seed());
  ASSERT_TRUE(r.status.ok()) << r.message;
  EXPECT_TRUE(r.pass) << r.message;

  // The last row is among those checked: leaving the last element unwritten fails.
  FaultyBackend bad(harness_cpu(), FaultyBackend::Fault::SKIP_LAST);
  r = op_case_run(bad, lin, DType::F32, op_seed());
  EXPECT_FALSE(r.pass) << r.message;

  OpCase wrong = lin;
  wrong.row_inputs = {1};  // the weight has no rows of the output
  r = op_case_run(harness_cpu(), wrong, DType::F32, op_seed());
  EXPECT_FALSE(r.status.ok()) << r.message;
}

// The oracle checked against itself in independent formulations, so its bugs cannot hide.
TEST(OpReference, SelfConsistent) {
  // conv 1x1 on one pixel equals linear; attention over one key returns v.
  RefTensor x{f32({1, 3, 1, 1}), {1.0, -2.0, 0.5}};
  RefTensor w{f32({2, 3, 1, 1}), {1.0, 2.0, 3.0, -1.0, 0.0, 4.0}};
  RefTensor b{f32({2}), {0.25, -0.25}};
  std::vector<RefTensor> conv_in{x, w, b};
  Result<RefTensor> conv = op_reference(OpKind::CONV2D, OpParams{}, conv_in);
  ASSERT_TRUE(conv.ok()) << conv.status().str();
  EXPECT_DOUBLE_EQ(conv->data[0], 1.0 - 4.0 + 1.5 + 0.25);
  EXPECT_DOUBLE_EQ(conv->data[1], -1.0 + 2.0 - 0.25);

  RefTensor q{f32({1, 2, 2}), {1.0, 2.0, 3.0, 4.0}};
  RefTensor k{f32({1, 1, 2}), {0.5, 0.5}};
  RefTensor v{f32({1, 1, 2}), {7.0, -3.0}};
  OpParams p;
  p.heads = 1;
  std::vector<RefTensor> attn_in{q, k, v};
  Result<RefTensor> attn = op_reference(OpKind::ATTENTION, p, attn_in);
  ASSERT_TRUE(attn.ok());
  EXPECT_DOUBLE_EQ(attn->data[0], 7.0);
  EXPECT_DOUBLE_EQ(attn->data[3], -3.0);

  // causal: the first query sees only the first key
  RefTensor k2{f32({1, 2, 2}), {0.5, 0.5, 9.0, 9.0}};
  RefTensor v2{f32({1, 2, 2}), {7.0, -3.0, 100.0, 100.0}};
  p.causal = true;
  std::vector<RefTensor> causal_in{q, k2, v2};
  Result<RefTensor> causal = op_reference(OpKind::ATTENTION, p, causal_in);
  ASSERT_TRUE(causal.ok());
  EXPECT_DOUBLE_EQ(causal->data[0], 7.0);
  EXPECT_DOUBLE_EQ(causal->data[1], -3.0);

  // timestep embedding: t = 0 gives cos 1, sin 0; odd dim pads a zero
  OpParams tp;
  tp.dim = 5;
  RefTensor t{f32({1}), {0.0}};
  std::vector<RefTensor> t_in{t};
  Result<RefTensor> te = op_reference(OpKind::TIMESTEP_EMBEDDING, tp, t_in);
  ASSERT_TRUE(te.ok());
  std::vector<double> want{1.0, 1.0, 0.0, 0.0, 0.0};
  EXPECT_EQ(te->data, want);
}

}  // namespace
}  // namespace hr::test
