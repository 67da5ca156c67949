// Two `headroom serve --queue` fronts and three `headroom worker`s (separate processes) on a
// redis-server of the test's own, with the tiny checkpoint on the CPU: ComfyUI's client flow
// through either front, every live worker's latest vram_update on a WebSocket that joins, jobs
// above a worker's budget never reaching it, 100 prompts from 10 clients, kill -9 of a worker
// mid-job, and the dead-letter stream.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>

#include "cluster.h"
#include "jobs/redis_client.h"
#include "jobs/redis_keys.h"

namespace hr::test {
namespace {

namespace fs = std::filesystem;
constexpr const char* kCrashMarker = "crash-this-worker-7f3a";

struct Cluster {
  fs::path dir;
  RedisServer redis;
  std::vector<std::unique_ptr<Child>> fronts;
  std::map<std::string, std::unique_ptr<Child>> workers;  // by worker id (--name)
  std::vector<uint16_t> ports;

  std::vector<std::string> common(const std::string& command) {
    return {headroom_binary(),          command,    "--queue",
            redis.url(),                "--models-dir", (dir / "models").string(),
            "--output-dir",             (dir / "output").string(),
            "--input-dir",              (dir / "input").string(),
            "--temp-dir",               (dir / "temp").string(),
            "--device",                 "cpu",      "--threads", "1"};
  }
  // small: a 14 MiB budget (VRAM classes up to 12 MiB); large-*: the default budget.
  bool worker_start(const std::string& name) {
    std::vector<std::string> argv = common("worker");
    for (const char* a : {"--lease", "3", "--max-deliveries", "2", "--name"}) argv.push_back(a);
    argv.push_back(name);
    if (name == "small") {
      argv.push_back("--vram-budget");
      argv.push_back("14MiB");
    }
    workers[name] = std::make_unique<Child>(argv, dir / (name + ".log"),
                                            std::vector<std::string>{
                                                std::string("HEADROOM_WORKER_CRASH_ON=") + kCrashMarker});
    return workers[name]->spawn();
  }
  // Workers that died (kill -9, the crash marker) are started again.
  void workers_revive() {
    for (auto& [name, w] : workers)
      if (!w->alive()) worker_start(name);
  }
  size_t workers_listed(uint16_t port) {
    HttpResult r = http_call(port, "GET", "/headroom/workers");
    return r.status == 200 && r.json().is_array() ? r.json().size() : 0;
  }
  std::string start() {
    dir = fs::temp_directory_path() / ("hr_cluster_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    models_folder_make(dir);
    if (std::string why = redis.start(dir); !why.empty()) return why;
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv = common("serve");
      for (const char* a : {"--port", "0", "--database", ":memory:"}) argv.push_back(a);
      fronts.push_back(std::make_unique<Child>(argv, dir / ("front" + std::to_string(i) + ".log")));
      if (!fronts.back()->spawn()) return "cannot start a front";
    }
    for (const char* name : {"small", "large-1", "large-2"})
      if (!worker_start(name)) return "cannot start a worker";
    for (auto& f : fronts) {
      if (!wait_for([&] { return front_port(*f) != 0; }, std::chrono::seconds(30)))
        return "a front did not start: " + f->log();
      ports.push_back(front_port(*f));
    }
    if (!wait_for([&] { return workers_listed(ports[0]) == 3; }, std::chrono::seconds(30)))
      return "the workers did not register: " + workers["small"]->log();
    return "";
  }
  std::string logs() {
    std::string out = "workers: " + http_call(ports[0], "GET", "/headroom/workers").body + "\n";
    for (auto& [name, w] : workers) out += "--- " + name + "\n" + w->log();
    for (auto& f : fronts) out += "--- front\n" + f->log();
    return out;
  }
};

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster;
    why_ = cluster_->start();
  }
  static void TearDownTestSuite() {
    fs::path dir = cluster_->dir;
    delete cluster_;
    fs::remove_all(dir);
  }
  void SetUp() override {
    ASSERT_TRUE(why_.empty()) << why_;
    cluster_->workers_revive();
    ASSERT_TRUE(wait_for([] { return cluster_->workers_listed(cluster_->ports[0]) == 3; },
                         std::chrono::seconds(30)));
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "%s\n", cluster_->logs().c_str());
  }
  uint16_t port(int front) { return cluster_->ports[size_t(front)]; }
  std::string queue(int front, const Json& workflow, const std::string& client) {
    HttpResult r = http_post_json(port(front), "/prompt",
                                  Json{{"prompt", workflow}, {"client_id", client}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? r.json().value("prompt_id", "") : "";
  }
  Json history(int front, const std::string& id) {
    HttpResult r = http_call(port(front), "GET", "/history/" + id);
    return r.json().is_object() && r.json().contains(id) ? r.json()[id] : Json();
  }
  // Waits until every id is in history (through `front`); the entries.
  std::map<std::string, Json> histories(int front, const std::vector<std::string>& ids,
                                        std::chrono::seconds timeout) {
    std::map<std::string, Json> out;
    wait_for(
        [&] {
          for (const std::string& id : ids)
            if (!out.count(id))
              if (Json h = history(front, id); !h.is_null()) out[id] = h;
          return out.size() == ids.size();
        },
        timeout);
    return out;
  }

  static Cluster* cluster_;
  static std::string why_;
};
Cluster* ClusterTest::cluster_ = nullptr;
std::string ClusterTest::why_;

Json workflow_text(int size, int steps, int64_t seed, const std::string& text) {
  Json wf = tiny_workflow(size, steps, seed);
  wf["6"]["inputs"]["text"] = text;
  return wf;
}

TEST_F(ClusterTest, EitherFrontRunsThePromptWithMessagesOnItsClient) {
  for (int front : {0, 1}) {
    WsReader ws;
    const std::string client = "flow-" + std::to_string(front);
    ASSERT_TRUE(ws.connect(port(front), client));
    const std::string id = queue(front, tiny_workflow(64, 2, 11 + front), client);
    std::vector<Json> seen;
    ASSERT_TRUE(ws.until_done(id, &seen)) << "no executing null on front " << front;
    std::set<std::string> types;
    for (const Json& m : seen)
      if (m["data"].is_object() && m["data"].value("prompt_id", "") == id) types.insert(m["type"]);
    for (const char* t : {"execution_start", "executing", "progress", "executed",
                          "execution_success"})
      EXPECT_TRUE(types.count(t)) << t << " missing on front " << front;
    // The other front sees the same history and serves the output from the shared folder.
    Json h = history(1 - front, id);
    ASSERT_TRUE(h.is_object());
    EXPECT_EQ(h["status"]["status_str"], "success");
    const Json& img = h["outputs"]["9"]["images"][0];
    HttpResult view = http_call(port(1 - front), "GET",
                                "/view?type=output&filename=" + img["filename"].get<std::string>());
    EXPECT_EQ(view.status, 200);
    EXPECT_EQ(view.body.substr(1, 3), "PNG");
  }
}

// Issue 35 through `serve --queue` and `headroom worker`: the front refuses a body nested
// 100,000 deep with the limit named and goes on; a worker refuses hostile filename_prefixes
// with ComfyUI's text and writes nothing outside the shared output folder; the next job runs.
TEST_F(ClusterTest, HostileRequestsAreRefusedByTheFrontAndTheWorkers) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  HttpResult r = http_call(
      port(0), "POST", "/prompt",
      "{\"prompt\": " + tiny_workflow().dump() + ", \"extra_data\": {\"x\": " + deep + "}}");
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("JSON nested deeper than 256 levels"), std::string::npos) << r.body;
  EXPECT_EQ(http_call(port(0), "GET", "/queue").status, 200);
  const fs::path outside = cluster_->dir / "outside";
  fs::create_directories(outside);
  fs::create_directories(cluster_->dir / "output");
  fs::create_symlink(outside, cluster_->dir / "output/link_out");
  std::vector<std::string> ids;
  for (const std::string& prefix :
       {(cluster_->dir / "abs/x").string(), std::string("../../x"), std::string("link_out/x")}) {
    Json wf = tiny_workflow(64, 1, 21);
    wf["9"]["inputs"]["filename_prefix"] = prefix;
    ids.push_back(queue(1, wf, "hostile"));
  }
  ids.push_back(queue(0, tiny_workflow(64, 1, 22), "hostile"));
  std::map<std::string, Json> h = histories(0, ids, std::chrono::seconds(60));
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    EXPECT_EQ(h[ids[i]]["status"]["status_str"], "error") << h[ids[i]].dump();
    EXPECT_NE(h[ids[i]].dump().find("Saving image outside the output folder is not allowed."),
              std::string::npos)
        << h[ids[i]].dump();
  }
  EXPECT_EQ(h[ids.back()]["status"]["status_str"], "success");
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_FALSE(fs::exists(cluster_->dir / "abs"));
  EXPECT_FALSE(fs::exists(cluster_->dir.parent_path() / "x_00001_.png"));
}

TEST_F(ClusterTest, StatsAndMetricsListEveryWorkersDevice) {
  HttpResult s = http_call(port(1), "GET", "/system_stats");
  ASSERT_EQ(s.status, 200);
  std::set<std::string> ids;
  const Json stats = s.json();
  for (const Json& d : stats["devices"]) ids.insert(d["headroom"].value("worker", ""));
  EXPECT_EQ(ids, (std::set<std::string>{"large-1", "large-2", "small"}));
  HttpResult m = http_call(port(0), "GET", "/metrics");
  EXPECT_NE(m.body.find("headroom_workers 3"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("headroom_worker_vram_bytes{worker=\"small\""), std::string::npos);
}

// The workers whose vram_update a client connecting to `front` receives within its first moments
// (the front's resend on join; an idle worker publishes only when its memory moves).
std::set<std::string> vram_workers_on_join(uint16_t front) {
  WsReader ws;
  if (!ws.connect(front, "vram-join")) return {"(no connection)"};
  std::set<std::string> out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::optional<Json> m = ws.next(left);
    if (!m) break;
    if ((*m)["type"] != "vram_update") continue;
    const Json& d = (*m)["data"];
    EXPECT_TRUE(d["device"].is_string() && !d["device"].get<std::string>().empty()) << d.dump();
    out.insert(d.value("worker", "(none)"));
  }
  return out;
}

// Note [latest per worker]: a dashboard opened while every worker is idle draws every device at
// once; a worker that was killed is not drawn again.
TEST_F(ClusterTest, ClientThatJoinsGetsTheLatestVramOfEveryLiveWorker) {
  ASSERT_TRUE(wait_for(
      [&] {
        Json q = http_call(port(0), "GET", "/queue").json();
        return q["queue_running"].empty() && q["queue_pending"].empty();
      },
      std::chrono::seconds(30)));
  for (int front : {0, 1})
    EXPECT_EQ(vram_workers_on_join(port(front)),
              (std::set<std::string>{"large-1", "large-2", "small"}))
        << "front " << front;
  cluster_->workers["small"]->kill(SIGKILL);
  ASSERT_TRUE(wait_for([] { return cluster_->workers_listed(cluster_->ports[0]) == 2; },
                       std::chrono::seconds(10)));
  EXPECT_EQ(vram_workers_on_join(port(1)), (std::set<std::string>{"large-1", "large-2"}));
}

TEST_F(ClusterTest, JobsAboveAWorkersBudgetNeverReachIt) {
  std::vector<std::string> big, all;
  // At 512 px even one entry's UNet call needs ~18.6 MiB (the cond/uncond split and streaming
  // cannot go lower): a 32 MiB-class job. Below ~384 px the VAE's smallest tile (~11.8 MiB)
  // sets the floor and the job fits the small worker.
  for (int i = 0; i < 2; ++i) big.push_back(queue(i, tiny_workflow(512, 1, 100 + i), "budget"));
  all = big;
  for (int i = 0; i < 4; ++i) all.push_back(queue(i % 2, tiny_workflow(64, 1, 200 + i), "budget"));
  std::map<std::string, Json> h = histories(0, all, std::chrono::seconds(120));
  ASSERT_EQ(h.size(), all.size());
  for (const std::string& id : all) EXPECT_EQ(h[id]["status"]["status_str"], "success") << id;
  for (const std::string& id : big)
    EXPECT_NE(h[id]["headroom"]["worker"], "small") << "a 32 MiB-class job ran on the 14 MiB worker";
}

// Each of 10 clients queues 10 prompts (alternating fronts, its WebSocket on one) and waits for
// `executing` null of each of them on its own WebSocket.
TEST_F(ClusterTest, HundredPromptsFromTenClientsAllComplete) {
  std::mutex mu;
  std::vector<std::string> ids, failures;
  std::vector<std::thread> clients;
  for (int c = 0; c < 10; ++c)
    clients.emplace_back([&, c] {
      WsReader ws;
      const std::string client = "many-" + std::to_string(c);
      if (!ws.connect(port(c % 2), client)) return;
      std::set<std::string> mine;
      for (int i = 0; i < 10; ++i) {
        HttpResult r = http_post_json(port((c + i) % 2), "/prompt",
                                      Json{{"prompt", tiny_workflow(64, 1, c * 100 + i)},
                                           {"client_id", client}});
        if (r.status == 200) mine.insert(r.json().value("prompt_id", ""));
      }
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(ids.end(), mine.begin(), mine.end());
      std::set<std::string> done;
      mu.unlock();
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(90);
      while (done.size() < mine.size() && std::chrono::steady_clock::now() < end) {
        std::optional<Json> m = ws.next(std::chrono::seconds(5));
        if (m && (*m)["type"] == "executing" && (*m)["data"]["node"].is_null())
          done.insert((*m)["data"].value("prompt_id", ""));
      }
      mu.lock();
      if (done != mine) failures.push_back(client + " heard " + std::to_string(done.size()));
    });
  for (std::thread& t : clients) t.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
  ASSERT_EQ(ids.size(), 100u);
  std::map<std::string, Json> h = histories(1, ids, std::chrono::seconds(30));
  size_t ok = 0;
  for (auto& [id, e] : h) ok += e["status"]["status_str"] == "success";
  EXPECT_EQ(ok, 100u);
}

TEST_F(ClusterTest, KillNineMidJobFinishesOnAnotherWorker) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port(0), "killer"));
  const std::string id = queue(0, tiny_workflow(64, 150, 7), "killer");
  std::optional<Json> p;
  do p = ws.until("progress", id);
  while (p && (*p)["data"]["value"].get<int>() < 3);
  ASSERT_TRUE(p) << "the long job never made progress";
  std::string victim;  // the heartbeat (every second) names the job its worker runs
  wait_for(
      [&] {
        for (const Json& w : http_call(port(0), "GET", "/headroom/workers").json())
          if (w.value("running", Json()) == id) victim = w["id"];
        return !victim.empty();
      },
      std::chrono::seconds(5));
  ASSERT_FALSE(victim.empty());
  cluster_->workers[victim]->kill(SIGKILL);
  ASSERT_TRUE(ws.until_done(id)) << "the job did not finish after its worker was killed";
  Json h = history(1, id);
  EXPECT_EQ(h["status"]["status_str"], "success");
  EXPECT_NE(h["headroom"]["worker"], victim);
  Json q = http_call(port(1), "GET", "/queue").json();
  EXPECT_TRUE(q["queue_running"].empty() && q["queue_pending"].empty()) << q.dump();
}

TEST_F(ClusterTest, JobThatKeepsKillingWorkersIsDeadLettered) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port(1), "doomed"));
  const std::string id = queue(1, workflow_text(64, 1, 3, kCrashMarker), "doomed");
  std::optional<Json> err = ws.until("execution_error", id, nullptr, std::chrono::seconds(60));
  ASSERT_TRUE(err) << "no execution_error for the dead-lettered job";
  EXPECT_EQ((*err)["data"]["exception_type"], "headroom.DeadLetter");
  Json h = history(0, id);
  EXPECT_EQ(h["status"]["status_str"], "error");
  EXPECT_EQ(h["headroom"]["deliveries"], 3);
  int dead = 0;
  for (auto& [name, w] : cluster_->workers) dead += !w->alive();
  EXPECT_EQ(dead, 2) << "deliveries 1 and 2 killed their workers; the third moved it aside";
  Result<RedisUrl> u = redis_url_parse(cluster_->redis.url());
  Result<std::unique_ptr<RedisClient>> c = RedisClient::connect(*u);
  ASSERT_TRUE(c.ok());
  Result<RedisReply> n = (*c)->command({"XLEN", redis_keys::kDead});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->integer, 1);
  // Work queued afterwards still runs on the surviving worker and the revived ones.
  cluster_->workers_revive();
  const std::string after = queue(0, tiny_workflow(64, 1, 4), "doomed");
  EXPECT_EQ(histories(0, {after}, std::chrono::seconds(30))[after]["status"]["status_str"],
            "success");
}

}  // namespace
}  // namespace hr::test
