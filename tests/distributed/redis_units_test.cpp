// The Redis queue's parts in this process against a redis-server of the test's own: URL
// parsing, the VRAM class ladder, decoding of malformed text, the client with Redis down, and a
// worker's job lifecycle (take, finish, release, dead letters) without running any model.
#include <gtest/gtest.h>

#include "cluster.h"
#include "jobs/redis_client.h"
#include "jobs/redis_job_source.h"
#include "jobs/redis_keys.h"
#include "jobs/redis_queue_state.h"
#include "jobs/redis_url.h"
#include "jobs/redis_wire.h"
#include "jobs/vram_class.h"

namespace hr::test {
namespace {

TEST(RedisUrl, ParsesAndRejects) {
  Result<RedisUrl> u = redis_url_parse("redis://10.0.0.5:6380/2");
  ASSERT_TRUE(u.ok()) << u.status().str();
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 2);
  Result<RedisUrl> auth = redis_url_parse("redis://:secret@host");
  ASSERT_TRUE(auth.ok());
  EXPECT_EQ(auth->password, "secret");
  EXPECT_EQ(auth->port, 6379);
  EXPECT_EQ(auth->str().find("secret"), std::string::npos);  // never printed
  for (const char* bad : {"http://x:1/0", "redis://", "redis://h:0/0", "redis://h:99999",
                          "redis://h:1/x", "redis://h:port/0"}) {
    Result<RedisUrl> r = redis_url_parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("redis://HOST:PORT/DB"), std::string::npos);
    }
  }
}

TEST(VramClass, SmallestClassThatFitsAndClassesBelowABudget) {
  EXPECT_EQ(vram_class_for(1), 4ull << 20);
  EXPECT_EQ(vram_class_for(12353536), 12ull << 20);  // the tiny checkpoint at 64 px
  EXPECT_EQ(vram_class_for(12722176), 16ull << 20);  // at 288 px
  EXPECT_EQ(vram_class_for(UINT64_MAX), vram_classes().back());
  std::vector<uint64_t> upto = vram_classes_upto(14ull << 20);
  ASSERT_EQ(upto.size(), 4u);  // 12, 8, 6, 4 MiB, largest first
  EXPECT_EQ(upto.front(), 12ull << 20);
  EXPECT_TRUE(vram_classes_upto(1ull << 20).empty());
  EXPECT_EQ(vram_class_name(24ull << 30), "24GiB");
  EXPECT_EQ(vram_class_name(1536ull << 20), "1536MiB");
}

TEST(RedisWire, MalformedTextIsAnErrorNotACrash) {
  for (const char* bad : {"", "[]", "{\"prompt_id\": 5}", "{\"prompt_id\": \"a\"}", "nul"})
    EXPECT_FALSE(job_decode(bad).ok()) << bad;
  EXPECT_FALSE(event_decode("{}").ok());
  EXPECT_FALSE(preview_decode("no newline").ok());
  EXPECT_FALSE(control_decode("{\"op\": 1}").ok());
  Job j;
  j.prompt_id = "p";
  j.number = -3;
  j.prompt = Json{{"1", {{"class_type", "X"}, {"inputs", Json::object()}}}};
  j.extra_data = {{"client_id", "c"}};
  Result<Job> back = job_decode(job_encode(j, 4ull << 20));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->number, -3);
  EXPECT_EQ(back->client_id(), "c");
}

TEST(RedisClientDown, ClearErrorWhenRedisIsNotThere) {
  RedisUrl u;
  u.port = free_port();  // nothing listens there
  Result<std::unique_ptr<RedisClient>> c = RedisClient::connect(u);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::IO);
  EXPECT_NE(c.status().message().find(u.str()), std::string::npos) << c.status().message();
}

class RedisLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("hr_redis_unit_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string why = redis_.start(dir_);
    ASSERT_TRUE(why.empty()) << why;
    Result<RedisUrl> u = redis_url_parse(redis_.url());
    ASSERT_TRUE(u.ok());
    Result<std::unique_ptr<RedisClient>> c = RedisClient::connect(*u);
    ASSERT_TRUE(c.ok()) << c.status().str();
    redis_client_ = std::shared_ptr<RedisClient>(std::move(c).value());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<RedisJobSource> source(int max_deliveries = 3) {
    RedisWorkerOptions o;
    o.worker_id = "w" + std::to_string(sources_++);
    o.budget = 64ull << 20;
    o.lease = std::chrono::milliseconds(200);
    o.max_deliveries = max_deliveries;
    Result<std::unique_ptr<RedisJobSource>> s = RedisJobSource::open(redis_client_, o);
    EXPECT_TRUE(s.ok()) << s.status().str();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // What a front does for a job of `vram_class` (RedisJobService::submit, without the plan).
  void queue(const std::string& id, uint64_t vram_class = 8ull << 20) {
    Job j;
    j.prompt_id = id;
    j.prompt = Json{{"1", {{"class_type", "X"}, {"inputs", Json::object()}}}};
    const std::string text = job_encode(j, vram_class);
    ASSERT_TRUE(redis_client_->command({"HSET", redis_keys::kPending, id, text}).ok());
    ASSERT_TRUE(redis_client_
                    ->command({"XADD", redis_keys::stream(vram_class, false), "*", "job", text})
                    .ok());
  }
  int64_t len(const std::string& key, const char* cmd = "XLEN") {
    Result<RedisReply> r = redis_client_->command({cmd, key});
    return r.ok() ? r->integer : -1;
  }

  std::filesystem::path dir_;
  RedisServer redis_;
  std::shared_ptr<RedisClient> redis_client_;
  int sources_ = 0;
};

TEST_F(RedisLifecycle, TakeFinishLeavesOnlyHistory) {
  auto s = source();
  queue("a");
  std::optional<Job> j = s->take(std::chrono::milliseconds(10));
  ASSERT_TRUE(j);
  EXPECT_EQ(j->prompt_id, "a");
  EXPECT_EQ(len(redis_keys::kPending, "HLEN"), 0);
  EXPECT_EQ(len(redis_keys::kRunning, "HLEN"), 1);
  Result<Json> q = queue_json(*redis_client_);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)["queue_running"].size(), 1u);
  ASSERT_TRUE(s->finish("a", Json{{"status", {{"status_str", "success"}}}}).ok());
  EXPECT_EQ(len(redis_keys::kRunning, "HLEN"), 0);
  EXPECT_EQ(len(redis_keys::stream(8ull << 20, false)), 0);  // acked and deleted
  Result<Json> h = history_get(*redis_client_, "a");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)["a"]["headroom"]["worker"], "w0");
}

TEST_F(RedisLifecycle, JobAboveTheBudgetIsNotRead) {
  auto s = source();  // budget 64 MiB
  queue("big", 96ull << 20);
  EXPECT_FALSE(s->take(std::chrono::milliseconds(10)));
  EXPECT_EQ(len(redis_keys::kPending, "HLEN"), 1);
}

TEST_F(RedisLifecycle, DeletedJobIsDroppedAndReleasedJobComesBack) {
  auto s = source();
  queue("gone");
  ASSERT_TRUE(redis_client_->command({"HDEL", redis_keys::kPending, "gone"}).ok());
  EXPECT_FALSE(s->take(std::chrono::milliseconds(10)));
  EXPECT_EQ(len(redis_keys::stream(8ull << 20, false)), 0);
  queue("back");
  ASSERT_TRUE(s->take(std::chrono::milliseconds(10)));
  s->release("back");
  EXPECT_EQ(len(redis_keys::kPending, "HLEN"), 1);
  std::optional<Job> again = source()->take(std::chrono::milliseconds(10));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->prompt_id, "back");
}

TEST_F(RedisLifecycle, ExpiredLeaseIsClaimedThenDeadLettered) {
  auto dead = source(2);  // takes the job and never finishes it: a killed worker
  queue("k");
  ASSERT_TRUE(dead->take(std::chrono::milliseconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the 200 ms lease
  auto second = source(2);
  std::optional<Job> j = second->take(std::chrono::milliseconds(10));
  ASSERT_TRUE(j) << "delivery 2 is claimed and runs";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(source(2)->take(std::chrono::milliseconds(10))) << "delivery 3 > 2: dead letter";
  EXPECT_EQ(len(redis_keys::kDead), 1);
  EXPECT_EQ(len(redis_keys::kRunning, "HLEN"), 0);
  Result<Json> h = history_get(*redis_client_, "k");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)["k"]["status"]["status_str"], "error");
  EXPECT_FALSE((*h)["k"]["headroom"]["dead_letter"].get<std::string>().empty());
}

TEST_F(RedisLifecycle, MalformedEntryGoesToTheDeadLetterStream) {
  auto s = source();
  ASSERT_TRUE(redis_client_
                  ->command({"XADD", redis_keys::stream(8ull << 20, false), "*", "job", "{oops"})
                  .ok());
  ASSERT_TRUE(redis_client_->command({"XADD", redis_keys::stream(8ull << 20, false), "*", "x", "1"})
                  .ok());
  queue("fine");
  std::optional<Job> j = s->take(std::chrono::milliseconds(10));
  ASSERT_TRUE(j) << "the malformed entries are moved aside; the next job runs";
  EXPECT_EQ(j->prompt_id, "fine");
  EXPECT_EQ(len(redis_keys::kDead), 2);
}

// Issue 35 behind the Redis front: text nested deeper than the limit in any Redis value (a
// stream entry, a pending job, a history entry) is refused by json_parse before anything
// recursive touches it; the worker dead-letters the entry and takes the next job.
TEST_F(RedisLifecycle, DeepValuesAreRefusedNotRecursedInto) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string job =
      R"({"prompt_id": "deep", "number": 1, "prompt": {"1": {"x": )" + deep + "}}}";
  Result<Job> decoded = job_decode(job);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("JSON nested deeper than"), std::string::npos)
      << decoded.status().message();
  const std::string stream = redis_keys::stream(8ull << 20, false);
  ASSERT_TRUE(redis_client_->command({"XADD", stream, "*", "job", job}).ok());
  ASSERT_TRUE(redis_client_->command({"HSET", redis_keys::kPending, "deep", job}).ok());
  ASSERT_TRUE(
      redis_client_->command({"HSET", redis_keys::kHistory, "deep", "{\"x\": " + deep + "}"}).ok());
  ASSERT_TRUE(redis_client_->command({"ZADD", redis_keys::kHistoryOrder, "1", "deep"}).ok());
  queue("fine");
  std::optional<Job> j = source()->take(std::chrono::milliseconds(10));
  ASSERT_TRUE(j) << "the deep entry is moved aside; the next job runs";
  EXPECT_EQ(j->prompt_id, "fine");
  EXPECT_EQ(len(redis_keys::kDead), 1);
  Result<Json> q = queue_json(*redis_client_);
  ASSERT_TRUE(q.ok()) << q.status().str();
  EXPECT_EQ((*q)["queue_pending"].size(), 0u) << "the deep pending record is skipped";
  Result<Json> h = history_json(*redis_client_, std::nullopt, std::nullopt);
  ASSERT_TRUE(h.ok()) << h.status().str();
  EXPECT_FALSE(h->contains("deep"));
  Result<Json> one = history_get(*redis_client_, "deep");
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->empty());
}

}  // namespace
}  // namespace hr::test
