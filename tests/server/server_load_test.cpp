// A loopback load test: 200 prompts from 20 client threads against one in-process server on the
// CPU (tiny checkpoint, 64x64, 1 step). Some prompts are invalid (400 with node_errors), some are
// interrupted while they run; every valid one must end in history as a success or, for those
// interrupted, with execution_interrupted. The process's RSS must stay flat meanwhile.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>

#include "server_fixture.h"

namespace hr::test {
namespace {

constexpr int kClients = 20;
constexpr int kPerClient = 10;
constexpr int64_t kRssGrowthMax = 64ll << 20;

int64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  return -1;
}

// Note [load mix]: of each client's 10 prompts, 2 are invalid, 1 (on even clients) runs 10000
// steps until the client interrupts it, 1 has the client's own seed (a real sampler run; the
// loader and text encoders come from the executor's output cache), and the rest are one shared
// prompt that the output cache answers after its first run (as ComfyUI's cache would). Every
// one of them goes through the queue, the worker, history and the WebSocket messages.
enum class Kind { INVALID_VALUE, INVALID_LINK, INTERRUPTED, OWN_SEED, SHARED };

Kind kind_of(int client, int j) {
  if (j == 0) return Kind::INVALID_VALUE;
  if (j == 5) return Kind::INVALID_LINK;
  if (j == 2 && client % 2 == 0) return Kind::INTERRUPTED;
  if (j == 7) return Kind::OWN_SEED;
  return Kind::SHARED;
}

Json prompt_of(Kind k, int client) {
  Json wf = tiny_workflow(64, 1, 1);
  switch (k) {
    case Kind::INVALID_VALUE: wf["3"]["inputs"]["sampler_name"] = "no_such_sampler"; break;
    case Kind::INVALID_LINK: wf["8"]["inputs"]["samples"] = Json::array({"99", 0}); break;
    case Kind::INTERRUPTED: wf = tiny_workflow(64, 10000, 1000 + client); break;
    case Kind::OWN_SEED: wf = tiny_workflow(64, 1, 100 + client); break;
    case Kind::SHARED: break;
  }
  return wf;
}

struct LoadTally {
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> invalid{0}, success{0}, interrupted{0}, finished{0};
  std::atomic<int64_t> rss_first{-1};
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    failures.push_back(what);
  }
};

class LoadTest : public ServerTest {
 protected:
  void client_run(int client, LoadTally& t) {
    const std::string cid = fmt::format("load-{}", client);
    WsReader ws;
    if (!ws.connect(port_, cid)) return t.fail(cid + ": no websocket");
    for (int j = 0; j < kPerClient; ++j) prompt_run(ws, cid, kind_of(client, j), client, t);
  }

  void prompt_run(WsReader& ws, const std::string& cid, Kind k, int client, LoadTally& t) {
    HttpResult r = http_post_json(port_, "/prompt",
                                  Json{{"prompt", prompt_of(k, client)}, {"client_id", cid}});
    if (k == Kind::INVALID_VALUE || k == Kind::INVALID_LINK) {
      const Json j = r.json();
      if (r.status != 400 || !j.is_object() || j["node_errors"].empty())
        return t.fail(fmt::format("{}: invalid prompt got {} {}", cid, r.status, r.body));
      ++t.invalid;
      return;
    }
    if (r.status != 200) return t.fail(fmt::format("{}: got {} {}", cid, r.status, r.body));
    const std::string id = r.json()["prompt_id"];
    if (k == Kind::INTERRUPTED) {
      if (!ws.until("progress", id)) return t.fail(id + ": never ran");
      http_post_json(port_, "/interrupt", Json{{"prompt_id", id}});
    }
    if (!ws.until_done(id)) return t.fail(id + ": no executing(null)");
    outcome_check(id, k, t);
  }

  void outcome_check(const std::string& id, Kind k, LoadTally& t) {
    const Json h = http_call(port_, "GET", "/history/" + id).json();
    if (!h.is_object() || !h.contains(id)) return t.fail(id + ": not in history");
    const Json& st = h[id]["status"];
    bool interrupted = false;
    for (const Json& m : st["messages"]) interrupted |= m[0] == "execution_interrupted";
    if (k == Kind::INTERRUPTED ? !interrupted : st["status_str"] != "success")
      return t.fail(id + ": " + st.dump());
    ++(k == Kind::INTERRUPTED ? t.interrupted : t.success);
    if (++t.finished == 50) t.rss_first = rss_bytes();
  }
};

TEST_F(LoadTest, TwoHundredPromptsFromTwentyClients) {
  const auto start = std::chrono::steady_clock::now();
  LoadTally t;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) clients.emplace_back([this, c, &t] { client_run(c, t); });
  for (std::thread& th : clients) th.join();
  const int64_t rss_last = rss_bytes();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (const std::string& f : t.failures) ADD_FAILURE() << f;
  EXPECT_EQ(t.invalid, kClients * 2);
  EXPECT_EQ(t.interrupted, kClients / 2);
  EXPECT_EQ(t.success, kClients * kPerClient - kClients * 2 - kClients / 2);
  // Nothing left behind: the queue is empty and history holds every valid prompt.
  EXPECT_EQ(http_call(port_, "GET", "/queue").json(),
            (Json{{"queue_running", Json::array()}, {"queue_pending", Json::array()}}));
  // Worker time per job from the history's message timestamps, and how many the cache answered.
  double busy_ms = 0;
  int all_cached = 0;
  const Json history = http_call(port_, "GET", "/history").json();
  for (const Json& e : history) {
    const Json& m = e["status"]["messages"];
    if (m.size() < 2) continue;
    const double ms = m.back()[1].value("timestamp", 0.0) - m.front()[1].value("timestamp", 0.0);
    busy_ms += ms;
    if (getenv("HR_LOAD_DEBUG")) std::printf("job %.0f ms: %s\n", ms, m.back()[0].dump().c_str());
    for (const Json& x : m)
      if (x[0] == "execution_cached" && x[1]["nodes"].size() == 7) ++all_cached;
  }
  EXPECT_EQ(history.size(), size_t(t.finished.load()));
  std::printf("load: worker busy %.1f s; %d jobs answered wholly by the output cache\n",
              busy_ms / 1000, all_cached);
  ASSERT_GT(t.rss_first, 0);
  const int64_t growth = rss_last - t.rss_first;
  std::printf("load: %d prompts in %.1f s (%.0f/s); RSS %.1f MiB after 50 jobs, %.1f MiB at the "
              "end (%+.1f MiB)\n",
              kClients * kPerClient, secs, kClients * kPerClient / secs,
              double(t.rss_first) / (1 << 20), double(rss_last) / (1 << 20),
              double(growth) / (1 << 20));
  EXPECT_LT(growth, kRssGrowthMax);
}

}  // namespace
}  // namespace hr::test
