// Tests for Status, Result<T>, HR_TRY / HR_ASSIGN_OR_RETURN and the memory-segment breakdown
// that out-of-memory errors carry.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/status.h"

namespace hr {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::OK);
  EXPECT_EQ(s.str(), "ok");
  EXPECT_FALSE(s.segments().has_value());
  EXPECT_TRUE(Status::ok_status().ok());
  EXPECT_TRUE(s.with_context("loading").ok());  // context never turns OK into an error
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  Status s = make_error(ErrorCode::NOT_FOUND, "file {} missing ({} tries)", "a.bin", 3);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::NOT_FOUND);
  EXPECT_EQ(s.message(), "file a.bin missing (3 tries)");
  EXPECT_EQ(s.str(), "not found: file a.bin missing (3 tries)");
  Status c = s.with_context("loading model");
  EXPECT_EQ(c.code(), ErrorCode::NOT_FOUND);
  EXPECT_EQ(c.message(), "loading model: file a.bin missing (3 tries)");
  EXPECT_EQ(s.message(), "file a.bin missing (3 tries)");  // original untouched
}

TEST(Status, ErrorCodeNamesAreDistinct) {
  const ErrorCode codes[] = {ErrorCode::OK,          ErrorCode::INVALID_ARGUMENT,
                             ErrorCode::NOT_FOUND,   ErrorCode::IO,
                             ErrorCode::CORRUPT,     ErrorCode::UNSUPPORTED,
                             ErrorCode::OUT_OF_MEMORY, ErrorCode::CANCELLED,
                             ErrorCode::INTERNAL};
  for (ErrorCode a : codes) {
    for (ErrorCode b : codes) {
      if (a != b) {
        EXPECT_STRNE(error_code_name(a), error_code_name(b));
      }
    }
  }
  EXPECT_STREQ(error_code_name(ErrorCode::OUT_OF_MEMORY), "out of memory");
}

TEST(MemorySegments, FormatsBytesPerUnit) {
  MemorySegments m;
  m.requested = 512;
  m.budget = 0;
  m.context = 3 * 1024;
  m.weights = 5ull << 20;
  m.activations = 3ull << 30;
  m.other = 0;
  const std::string s = m.str();
  EXPECT_NE(s.find("requested 512 B"), std::string::npos) << s;
  EXPECT_NE(s.find("context 3.0 KiB"), std::string::npos) << s;
  EXPECT_NE(s.find("weights 5.0 MiB"), std::string::npos) << s;
  EXPECT_NE(s.find("activations 3.00 GiB"), std::string::npos) << s;
  EXPECT_NE(s.find("other 0 B"), std::string::npos) << s;
  EXPECT_NE(s.find("budget 0 B"), std::string::npos) << s;
  m.budget = UINT64_MAX;
  EXPECT_NE(m.str().find("budget unlimited"), std::string::npos) << m.str();
}

TEST(Status, OutOfMemoryCarriesSegmentsThroughContext) {
  MemorySegments m;
  m.requested = 2ull << 30;
  m.budget = 4ull << 30;
  m.weights = 3ull << 30;
  Status s(ErrorCode::OUT_OF_MEMORY, "unet arena");
  s.set_segments(m);
  ASSERT_TRUE(s.segments().has_value());
  EXPECT_EQ(s.segments()->weights, 3ull << 30);
  const std::string str = s.str();
  EXPECT_EQ(str.rfind("out of memory: unet arena [", 0), 0u) << str;
  EXPECT_NE(str.find("weights 3.00 GiB"), std::string::npos) << str;
  EXPECT_NE(str.find("budget 4.00 GiB"), std::string::npos) << str;
  Status c = s.with_context("node 3 (KSampler)");
  ASSERT_TRUE(c.segments().has_value());
  EXPECT_EQ(c.segments()->requested, 2ull << 30);
  EXPECT_EQ(c.message(), "node 3 (KSampler): unet arena");
}

TEST(Result, HoldsValueOrStatus) {
  Result<int> good(42);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  EXPECT_EQ(good.value(), 42);
  EXPECT_TRUE(good.status().ok());

  Result<int> bad(make_error(ErrorCode::IO, "disk"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::IO);
  EXPECT_EQ(bad.status().message(), "disk");

  // An OK status is not a value: building a Result from one is a bug, reported as such.
  Result<int> odd{Status()};
  EXPECT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), ErrorCode::INTERNAL);
}

TEST(Result, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(7));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, 7);
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
  Result<std::string> s(std::string("abc"));
  EXPECT_EQ(s->size(), 3u);
}

Status fails_when(bool fail, int* reached) {
  if (fail) return make_error(ErrorCode::INVALID_ARGUMENT, "asked to fail");
  ++*reached;
  return Status();
}

Status try_chain(bool fail_second, int* reached) {
  HR_TRY(fails_when(false, reached));
  HR_TRY(fails_when(fail_second, reached));
  ++*reached;  // only reached when both succeed
  return Status();
}

TEST(Macros, TryReturnsFirstError) {
  int reached = 0;
  EXPECT_TRUE(try_chain(false, &reached).ok());
  EXPECT_EQ(reached, 3);
  reached = 0;
  Status s = try_chain(true, &reached);
  EXPECT_EQ(s.code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.message(), "asked to fail");
  EXPECT_EQ(reached, 1);
}

Result<int> parse_positive(int v) {
  if (v <= 0) return make_error(ErrorCode::INVALID_ARGUMENT, "{} is not positive", v);
  return v;
}

Result<std::unique_ptr<int>> make_box(int v) {
  HR_ASSIGN_OR_RETURN(int checked, parse_positive(v));
  return std::make_unique<int>(checked * 2);
}

Result<int> sum_boxes(int a, int b) {
  HR_ASSIGN_OR_RETURN(auto x, make_box(a));  // two uses in one function must not clash
  HR_ASSIGN_OR_RETURN(std::unique_ptr<int> y, make_box(b));
  return *x + *y;
}

Status assign_into_existing(int v, int* out) {
  int tmp = -1;
  HR_ASSIGN_OR_RETURN(tmp, parse_positive(v));
  *out = tmp;
  return Status();
}

TEST(Macros, AssignOrReturn) {
  Result<int> ok = sum_boxes(2, 3);
  ASSERT_TRUE(ok.ok()) << ok.status().str();
  EXPECT_EQ(*ok, 10);
  Result<int> bad = sum_boxes(2, -4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "-4 is not positive");
  int out = 0;
  EXPECT_TRUE(assign_into_existing(5, &out).ok());
  EXPECT_EQ(out, 5);
  out = 0;
  EXPECT_EQ(assign_into_existing(0, &out).code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(out, 0);
}

}  // namespace
}  // namespace hr
