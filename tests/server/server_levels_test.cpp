// The warning and danger levels against a running server on the CPU with the tiny checkpoint:
// a plan above warning runs with the budget lowered to it (Note [warning level]); memory in use
// above danger holds new jobs in the queue until it falls (Note [danger hold]); the levels come
// from the options and POST /headroom/levels.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "backend/allocator.h"
#include "server_fixture.h"

namespace hr::test {
namespace {

// Note [levels test budget]: at 16 MiB the 64x64 workflow plans a peak of 16.0 MiB (weights kept
// resident); at the default warning level (12.8 MiB) it fits by streaming part of the UNet's
// weights, and nothing fits at 8 MiB (the VAE decode's arena alone is 11.5 MiB; `headroom plan`).
constexpr uint64_t kBudget = 16ull << 20;

// Note [hold polls]: a held worker looks at memory again every 50 ms (Note [danger hold] in
// jobs/job_runner.cpp), and each look that finds memory above danger with a job waiting asks the
// allocator's idle holders for room first. A holder that frees nothing and counts those asks
// tells the test how often the worker has decided to keep holding since it was registered, so
// the test can wait for that instead of sleeping for a while and hoping the worker looked.
class HoldPolls final : public Reclaimable {
 public:
  explicit HoldPolls(Allocator& alloc) : alloc_(alloc) { alloc_.reclaimable_add(this); }
  ~HoldPolls() override { alloc_.reclaimable_remove(this); }
  HoldPolls(const HoldPolls&) = delete;
  HoldPolls& operator=(const HoldPolls&) = delete;

  uint64_t reclaim(uint64_t) override {
    ++count_;
    return 0;
  }
  uint64_t last_use() const override { return 0; }
  bool in_use() const override { return false; }
  uint64_t reclaimable_bytes() const override { return 0; }

  uint64_t count() const { return count_.load(); }
  // Whether `n` asks came within `limit`.
  bool wait_for(uint64_t n, std::chrono::milliseconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (count() < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return count() >= n;
  }

 private:
  Allocator& alloc_;
  std::atomic<uint64_t> count_{0};
};

class LevelsTest : public ServerTest {
  void configure(ServeOptions& o) override { o.memory.vram_budget = "16MiB"; }

 protected:
  // Runs one job for `client` to its end; the messages seen on the way.
  std::vector<Json> run_job(WsReader& ws, const std::string& client, std::string* id_out) {
    const std::string id = queue_prompt(tiny_workflow(64, 1), client);
    std::vector<Json> seen;
    EXPECT_TRUE(ws.until_done(id, &seen)) << "no end for " << id;
    *id_out = id;
    return seen;
  }
  static std::optional<Json> first_of(const std::vector<Json>& seen, const std::string& type) {
    for (const Json& m : seen)
      if (m["type"] == type) return m;
    return std::nullopt;
  }
};

TEST_F(LevelsTest, PlanAboveWarningRunsWithTheBudgetLowered) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "warn"));
  std::string id;
  std::vector<Json> seen = run_job(ws, "warn", &id);
  std::optional<Json> m = first_of(seen, "headroom_memory");
  ASSERT_TRUE(m) << "no headroom_memory message";
  const Json& d = (*m)["data"];
  const uint64_t warning = uint64_t(double(kBudget) * 0.8);
  EXPECT_EQ(d["level"], "warning");
  EXPECT_EQ(d["degraded"], true);
  EXPECT_EQ(d["warning"], warning);
  EXPECT_GT(d["planned_peak"].get<uint64_t>(), warning);
  EXPECT_LE(d["planned_peak_degraded"].get<uint64_t>(), warning);
  const std::string msg = d["message"];
  EXPECT_NE(msg.find("above the warning level"), std::string::npos) << msg;
  EXPECT_NE(msg.find("streams"), std::string::npos) << msg;

  // The job kept below warning, succeeded, and its history says why it streamed.
  EXPECT_LE(app_->allocator().total().peak, warning);
  EXPECT_EQ(app_->allocator().budget(), kBudget);  // given back after the job
  const Json h = http_call(port_, "GET", "/history/" + id).json()[id];
  EXPECT_EQ(h["status"]["status_str"], "success");
  bool kept = false;
  for (const Json& e : h["status"]["messages"]) kept |= e[0] == "headroom_memory";
  EXPECT_TRUE(kept) << h["status"]["messages"].dump();

  // vram_update reports the levels in bytes and fractions.
  std::optional<Json> v = first_of(seen, "vram_update");
  ASSERT_TRUE(v);
  EXPECT_EQ((*v)["data"]["warning"], warning);
  EXPECT_EQ((*v)["data"]["danger"], uint64_t(double(kBudget) * 0.9));
  EXPECT_EQ((*v)["data"]["budget"], kBudget);
}

TEST_F(LevelsTest, NoPlanBelowWarningRunsAtTheFullBudget) {
  HttpResult r = http_post_json(port_, "/headroom/levels", Json{{"warning", 0.5}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["warning"], 0.5);
  EXPECT_EQ(r.json()["danger"], 0.9);
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "warn2"));
  std::string id;
  std::vector<Json> seen = run_job(ws, "warn2", &id);
  std::optional<Json> m = first_of(seen, "headroom_memory");
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)["data"]["degraded"], false);
  EXPECT_NE((*m)["data"]["message"].get<std::string>().find("full budget"), std::string::npos);
  EXPECT_EQ(http_call(port_, "GET", "/history/" + id).json()[id]["status"]["status_str"],
            "success");
}

TEST_F(LevelsTest, AboveDangerNewJobsWaitUntilMemoryFalls) {
  // Another holder of the server's allocator takes it above danger (14.4 MiB of 16).
  Result<DeviceBuffer> other = app_->allocator().allocate(15ull << 20, Pool::OTHER, "test holder");
  ASSERT_TRUE(other.ok()) << other.status().str();
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "danger"));
  const std::string id = queue_prompt(tiny_workflow(64, 1), "danger");
  std::optional<Json> held = ws.until("headroom_queue_held", "");
  ASSERT_TRUE(held);
  EXPECT_EQ((*held)["data"]["held"], true);
  EXPECT_EQ((*held)["data"]["danger"], uint64_t(double(kBudget) * 0.9));
  // Note [hold polls]: not a sleep, but three more looks of the worker that kept holding.
  HoldPolls polls(app_->allocator());
  ASSERT_TRUE(polls.wait_for(3, std::chrono::seconds(20))) << polls.count() << " polls";
  const Json q = http_call(port_, "GET", "/queue").json();
  EXPECT_EQ(q["queue_running"].size(), 0u);
  ASSERT_EQ(q["queue_pending"].size(), 1u);  // waiting, not failed
  EXPECT_EQ(q["queue_pending"][0][1], id);
  EXPECT_EQ(http_call(port_, "GET", "/headroom/memory").json()["queue_held"], true);
  EXPECT_NE(http_call(port_, "GET", "/metrics").body.find("headroom_queue_held 1"),
            std::string::npos);
  EXPECT_TRUE(http_call(port_, "GET", "/history/" + id).json().empty());

  other->reset();  // memory falls below danger: the job runs
  std::vector<Json> seen;
  ASSERT_TRUE(ws.until_done(id, &seen));
  bool released = false;
  for (const Json& m : seen) released |= m["type"] == "headroom_queue_held" && !m["data"]["held"];
  EXPECT_TRUE(released);
  EXPECT_EQ(http_call(port_, "GET", "/history/" + id).json()[id]["status"]["status_str"],
            "success");
  EXPECT_EQ(http_call(port_, "GET", "/headroom/memory").json()["queue_held"], false);
}

TEST_F(LevelsTest, LevelsRouteValidatesAndMemoryReportsThem) {
  EXPECT_EQ(http_post_json(port_, "/headroom/levels", Json{{"warning", 0.95}}).status, 400);
  EXPECT_EQ(http_post_json(port_, "/headroom/levels", Json{{"danger", 1.5}}).status, 400);
  EXPECT_EQ(http_post_json(port_, "/headroom/levels", Json{{"warning", "high"}}).status, 400);
  EXPECT_EQ(http_call(port_, "POST", "/headroom/levels", "{not json").status, 400);
  HttpResult ok =
      http_post_json(port_, "/api/headroom/levels", Json{{"warning", 0.6}, {"danger", 0.7}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  const Json lv = http_call(port_, "GET", "/headroom/levels").json();
  EXPECT_EQ(lv["warning"], 0.6);
  EXPECT_EQ(lv["danger"], 0.7);
  EXPECT_EQ(lv["danger_bytes"], uint64_t(double(kBudget) * 0.7));
  const Json mem = http_call(port_, "GET", "/headroom/memory").json();
  EXPECT_EQ(mem["levels"], lv);
  EXPECT_EQ(mem["now"]["danger_fraction"], 0.7);
}

class LevelsFromOptionsTest : public ServerTest {
  void configure(ServeOptions& o) override {
    o.server.warning = 0.7;
    o.server.danger = 0.85;
  }
};

TEST_F(LevelsFromOptionsTest, OptionsSetTheLevels) {
  const Json lv = http_call(port_, "GET", "/headroom/levels").json();
  EXPECT_EQ(lv["warning"], 0.7);
  EXPECT_EQ(lv["danger"], 0.85);
}

TEST(ServeLevels, BadLevelsAreRefusedAtStart) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("hr_lv_{}", ::getpid());
  ServeOptions o;
  o.server.port = 0;
  o.server.output_dir = (dir / "o").string();
  o.server.input_dir = (dir / "i").string();
  o.server.temp_dir = (dir / "t").string();
  o.device = "cpu";
  o.database = ":memory:";
  o.server.warning = 0.95;
  o.server.danger = 0.9;
  Result<std::unique_ptr<ServeApp>> app = ServeApp::start(o);
  ASSERT_FALSE(app.ok());
  EXPECT_NE(app.status().str().find("--vram-warning"), std::string::npos) << app.status().str();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hr::test
