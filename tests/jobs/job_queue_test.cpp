// The queue's ComfyUI semantics (numbers, front, delete, clear, history paging) on both stores,
// and persistence: a new queue over the same SQLite file sees what the old one left, including a
// job that was running when its process died.
#include "jobs/job_queue.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "jobs/sqlite_store.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class JobQueueTest : public ::testing::TestWithParam<bool> {  // true: SQLite
 protected:
  void SetUp() override {
    db_ = fs::temp_directory_path() / fmt::format("hr_jobs_{}_{}.sqlite", ::getpid(), counter_++);
    fs::remove(db_);
  }
  void TearDown() override {
    for (const char* ext : {"", "-wal", "-shm"}) fs::remove(db_.string() + ext);
  }
  std::unique_ptr<JobQueue> open() {
    std::unique_ptr<JobStore> store;
    if (GetParam()) {
      Result<std::unique_ptr<JobStore>> s = job_store_sqlite(db_.string());
      EXPECT_TRUE(s.ok()) << s.status().str();
      store = std::move(s).value();
    } else {
      store = job_store_memory();
    }
    auto q = std::make_unique<JobQueue>(std::move(store), 3);
    EXPECT_TRUE(q->open().ok());
    return q;
  }
  static Job submit(JobQueue& q, const std::string& id, bool front = false,
                    std::optional<int64_t> number = {}) {
    JobSubmit s;
    s.prompt = Json{{"id", id}};
    s.prompt_id = id;
    s.front = front;
    s.number = number;
    s.extra_data = Json{{"client_id", "c"}};
    s.outputs = {"9"};
    Result<Job> j = q.submit(std::move(s));
    EXPECT_TRUE(j.ok()) << j.status().str();
    return j.ok() ? *j : Job();
  }
  fs::path db_;
  static inline int counter_ = 0;
};

TEST_P(JobQueueTest, NumbersFrontAndOrder) {
  auto q = open();
  EXPECT_EQ(submit(*q, "a").number, 0);
  EXPECT_EQ(submit(*q, "b").number, 1);
  EXPECT_EQ(submit(*q, "c", true).number, -2);  // front: before everything queued
  EXPECT_EQ(submit(*q, "d", false, 100).number, 100);
  EXPECT_FALSE(q->submit(JobSubmit{Json::object(), "a"}).ok());  // already queued
  EXPECT_EQ(q->remaining(), 4u);
  const Json queue = q->queue_json();
  ASSERT_EQ(queue["queue_pending"].size(), 4u);
  EXPECT_EQ(queue["queue_pending"][0],
            Json::array({-2, "c", {{"id", "c"}}, {{"client_id", "c"}}, {"9"}}));
  std::vector<std::string> order;
  while (auto j = q->take(0ms)) {
    order.push_back(j->prompt_id);
    EXPECT_EQ(q->queue_json()["queue_running"][0][1], j->prompt_id);
    EXPECT_FALSE(q->take(0ms));  // one job at a time
    ASSERT_TRUE(q->finish(j->prompt_id, Json{{"prompt", j->queue_item()}}).ok());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"c", "a", "b", "d"}));
  EXPECT_EQ(q->remaining(), 0u);
}

TEST_P(JobQueueTest, DeleteClearAndHistoryPaging) {
  auto q = open();
  for (const char* id : {"a", "b", "c", "d"}) submit(*q, id);
  EXPECT_EQ(q->pending_delete({"b", "zz"}), 1u);
  auto running = q->take(0ms);
  ASSERT_TRUE(running);
  EXPECT_EQ(q->pending_clear(), 2u);  // c, d; the running a stays
  EXPECT_EQ(q->remaining(), 1u);
  ASSERT_TRUE(q->finish("a", Json{{"n", 0}}).ok());
  for (const char* id : {"e", "f", "g"}) {
    submit(*q, id);
    auto j = q->take(0ms);
    ASSERT_TRUE(j);
    ASSERT_TRUE(q->finish(j->prompt_id, Json{{"n", id}}).ok());
  }
  // max_history 3: a was dropped.
  EXPECT_EQ(q->history_count(), 3u);
  EXPECT_TRUE(q->history_get("a").empty());
  EXPECT_EQ(q->history_get("f"), (Json{{"f", {{"n", "f"}}}}));
  Json last2 = q->history_json(2, std::nullopt);
  EXPECT_EQ(last2.size(), 2u);
  EXPECT_TRUE(last2.contains("f") && last2.contains("g"));
  Json first = q->history_json(1, 0);
  EXPECT_TRUE(first.contains("e"));
  q->history_delete({"e"});
  EXPECT_EQ(q->history_json(std::nullopt, std::nullopt).size(), 2u);
  q->history_clear();
  EXPECT_EQ(q->history_count(), 0u);
}

TEST_P(JobQueueTest, ReleaseReturnsTheRunningJobToTheFront) {
  auto q = open();
  submit(*q, "a");
  submit(*q, "b");
  auto j = q->take(0ms);
  ASSERT_TRUE(j);
  q->release(j->prompt_id);
  EXPECT_EQ(q->take(0ms)->prompt_id, "a");
}

TEST_P(JobQueueTest, TakeWaitsAndWakes) {
  auto q = open();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(q->take(50ms));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 40ms);
  std::thread waker([&] {
    std::this_thread::sleep_for(20ms);
    submit(*q, "x");
  });
  auto j = q->take(5s);
  waker.join();
  ASSERT_TRUE(j);
  EXPECT_EQ(j->prompt_id, "x");
}

INSTANTIATE_TEST_SUITE_P(Stores, JobQueueTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "sqlite" : "memory"; });

// Note [finish atomically] in jobs/job_store.h, as a restart sees it.
TEST(SqliteStore, RestartKeepsPendingRunningAndHistory) {
  const fs::path db =
      fs::temp_directory_path() / fmt::format("hr_jobs_restart_{}.sqlite", ::getpid());
  fs::remove(db);
  {
    auto q = std::make_unique<JobQueue>(std::move(job_store_sqlite(db.string())).value());
    ASSERT_TRUE(q->open().ok());
    for (const char* id : {"done", "running", "waiting"}) {
      JobSubmit s;
      s.prompt = Json{{"id", id}};
      s.prompt_id = id;
      ASSERT_TRUE(q->submit(std::move(s)).ok());
    }
    ASSERT_TRUE(q->finish(q->take(0ms)->prompt_id, Json{{"status", "ok"}}).ok());
    ASSERT_EQ(q->take(0ms)->prompt_id, "running");
    // The process "dies" here: the queue is dropped without finishing "running".
  }
  auto q = std::make_unique<JobQueue>(std::move(job_store_sqlite(db.string())).value());
  ASSERT_TRUE(q->open().ok());
  EXPECT_EQ(q->history_get("done"), (Json{{"done", {{"status", "ok"}}}}));
  EXPECT_EQ(q->remaining(), 2u);
  EXPECT_EQ(q->take(0ms)->prompt_id, "running");
  JobSubmit s;
  s.prompt_id = "next";
  EXPECT_EQ(q->submit(std::move(s))->number, 3);  // numbers continue
  for (const char* ext : {"", "-wal", "-shm"}) fs::remove(db.string() + ext);
}

TEST(SqliteStore, UnopenableFileIsAnError) {
  Result<std::unique_ptr<JobStore>> s = job_store_sqlite("/nonexistent-dir/x/jobs.sqlite");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::IO);
}

}  // namespace
}  // namespace hr
