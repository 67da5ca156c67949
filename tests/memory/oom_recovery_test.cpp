// Note [OOM recovery]: the default recovery policy drops caches, asks holders for room, then
// retries with the weights limited to what the device has free beside the arena, halving it on
// every further failure, and gives up after OomRecovery::kAttempts with the first failure named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/oom_recovery.h"

namespace hr {
namespace {

// Records the steps taken; retry fails with OUT_OF_MEMORY until `succeed_at` (0-based).
class FakeRun final : public RecoveryRun {
 public:
  FakeRun(uint64_t free, uint64_t arena, int succeed_at)
      : free_(free), arena_(arena), succeed_at_(succeed_at) {}
  void caches_drop() override { steps.push_back("drop"); }
  void holders_reclaim() override { steps.push_back("reclaim"); }
  uint64_t device_free() const override { return free_; }
  uint64_t arena_bytes() const override { return arena_; }
  Result<std::vector<HostTensor>> retry(uint64_t weights_limit) override {
    steps.push_back("retry");
    limits.push_back(weights_limit);
    if (int(limits.size()) - 1 == succeed_at_) return std::vector<HostTensor>{};
    return Status(ErrorCode::OUT_OF_MEMORY, "still no room");
  }
  std::vector<std::string> steps;
  std::vector<uint64_t> limits;

 private:
  uint64_t free_, arena_;
  int succeed_at_;
};

TEST(OomRecovery, RetriesWithHalvingWeightLimitsUntilOneRuns) {
  FakeRun run(2000, 100, 2);  // usable 1900, less the arena: 1800 for the weights
  OomRecovery policy;
  Result<std::vector<HostTensor>> out = policy.recover(run, Status(ErrorCode::OUT_OF_MEMORY, "x"));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(run.limits, (std::vector<uint64_t>{1800, 900, 450}));
  EXPECT_EQ(run.steps, (std::vector<std::string>{"drop", "reclaim", "retry", "drop", "retry",
                                                 "drop", "retry"}));
}

TEST(OomRecovery, GivesUpAfterItsAttemptsNamingTheFirstFailure) {
  FakeRun run(UINT64_MAX, 100, -1);  // host memory: no limit to learn from the device
  OomRecovery policy;
  Result<std::vector<HostTensor>> out =
      policy.recover(run, Status(ErrorCode::OUT_OF_MEMORY, "the arena"));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_NE(out.status().message().find("the arena"), std::string::npos) << out.status().message();
  EXPECT_EQ(run.limits, std::vector<uint64_t>(OomRecovery::kAttempts, UINT64_MAX));
  EXPECT_EQ(run.steps.back(), "drop");
}

TEST(OomRecovery, OtherErrorsEndTheRecovery) {
  class Failing final : public RecoveryRun {
   public:
    void caches_drop() override {}
    void holders_reclaim() override {}
    uint64_t device_free() const override { return 1000; }
    uint64_t arena_bytes() const override { return 2000; }  // more than free: limit 0
    Result<std::vector<HostTensor>> retry(uint64_t limit) override {
      ++tries;
      last = limit;
      return Status(ErrorCode::INTERNAL, "broken");
    }
    int tries = 0;
    uint64_t last = 1;
  } run;
  OomRecovery policy;
  Result<std::vector<HostTensor>> out = policy.recover(run, Status(ErrorCode::OUT_OF_MEMORY, "x"));
  EXPECT_EQ(out.status().code(), ErrorCode::INTERNAL);
  EXPECT_EQ(run.tries, 1);
  EXPECT_EQ(run.last, 0u);
}

}  // namespace
}  // namespace hr
