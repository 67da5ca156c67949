// What the dashboard (web/) needs from the server: its static files at /headroom/ and / with
// the right types and confined to the web root (server/routes_static.cpp), a clear 404 when it
// was not built, plans for a budget the page gives, and each job's planned and measured peaks
// in its history entry (Note [history peaks] in jobs/job_execution.cpp).
#include <gtest/gtest.h>

#include <fstream>

#include "server/web_root.h"
#include "server_fixture.h"

namespace hr::test {
namespace {

namespace fs = std::filesystem;

void file_write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

const char* const kIndex = "<!doctype html><title>headroom</title>";

class StaticTest : public ServerTest {
  void configure(ServeOptions& o) override {
    const fs::path web = dir_ / "web";
    file_write(web / "index.html", kIndex);
    file_write(web / "assets" / "app.js", "export const x = 1;\n");
    file_write(web / "assets" / "style.css", "body {}\n");
    file_write(web / "assets" / "icon.svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"/>");
    file_write(dir_ / "secret.txt", "not for clients");
    fs::create_symlink(dir_ / "secret.txt", web / "assets" / "leak.txt");
    o.server.web_root = web.string();
  }
};

TEST_F(StaticTest, ServesTheDashboardAtHeadroomAndTheRoot) {
  for (const char* target : {"/headroom/", "/headroom", "/"}) {
    HttpResult r = http_call(port_, "GET", target);
    EXPECT_EQ(r.status, 200) << target;
    EXPECT_EQ(r.body, kIndex) << target;
    EXPECT_EQ(r.content_type, "text/html; charset=utf-8") << target;
  }
  const std::pair<const char*, const char*> types[] = {
      {"/headroom/assets/app.js", "text/javascript; charset=utf-8"},
      {"/headroom/assets/style.css", "text/css; charset=utf-8"},
      {"/headroom/assets/icon.svg", "image/svg+xml"}};
  for (const auto& [target, type] : types) {
    HttpResult r = http_call(port_, "GET", target);
    EXPECT_EQ(r.status, 200) << target;
    EXPECT_EQ(r.content_type, type) << target;
  }
  EXPECT_EQ(http_call(port_, "GET", "/headroom/assets/app.js").body, "export const x = 1;\n");
  EXPECT_EQ(http_call(port_, "GET", "/headroom/assets/missing.js").status, 404);
  EXPECT_EQ(http_call(port_, "POST", "/headroom/", "{}").status, 405);
}

TEST_F(StaticTest, PathsStayInsideTheWebRoot) {
  EXPECT_EQ(http_call(port_, "GET", "/headroom/assets/..").status, 403);
  EXPECT_EQ(http_call(port_, "GET", "/headroom/assets/%2E%2E").status, 403);
  HttpResult leak = http_call(port_, "GET", "/headroom/assets/leak.txt");
  EXPECT_EQ(leak.status, 403);
  EXPECT_EQ(leak.body.find("not for clients"), std::string::npos);
  // Deeper paths match no route at all.
  EXPECT_EQ(http_call(port_, "GET", "/headroom/assets/%2E%2E/%2E%2E/secret.txt").status, 404);
}

TEST_F(StaticTest, ComfyUiAndHeadroomRoutesAreUnchanged) {
  HttpResult q = http_call(port_, "GET", "/queue");
  EXPECT_EQ(q.status, 200);
  EXPECT_TRUE(q.json().contains("queue_running"));
  EXPECT_EQ(http_call(port_, "GET", "/api/prompt").json()["exec_info"]["queue_remaining"], 0);
  EXPECT_TRUE(http_call(port_, "GET", "/headroom/memory").json().contains("allocator"));
  EXPECT_EQ(http_call(port_, "GET", "/headroom/levels").json()["warning"], 0.8);
  EXPECT_EQ(http_call(port_, "GET", "/headroom/plan").status, 405);
  EXPECT_EQ(http_call(port_, "GET", "/no/such/route").status, 404);
}

class UnbuiltTest : public ServerTest {
  void configure(ServeOptions& o) override { o.server.web_root = (dir_ / "no-dist").string(); }
};

TEST_F(UnbuiltTest, SaysTheDashboardIsNotBuilt) {
  for (const char* target : {"/headroom/", "/", "/headroom/assets/app.js"}) {
    HttpResult r = http_call(port_, "GET", target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_NE(r.body.find("the dashboard is not built"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("npm ci && npm run build"), std::string::npos) << r.body;
  }
}

TEST(WebRoot, FallsBackToTheSourceTreesDist) {
  const fs::path found = web_root_find();
  EXPECT_EQ(found.filename(), "dist") << found;
  EXPECT_EQ(found.parent_path().filename(), "web") << found;
}

TEST_F(ServerTest, PlanTakesABudget) {
  auto plan = [&](const Json& budget) {
    return http_post_json(port_, "/headroom/plan",
                          Json{{"prompt", tiny_workflow(64, 1)}, {"budget", budget}});
  };
  HttpResult server = plan(nullptr);
  ASSERT_EQ(server.status, 200) << server.body;
  const Json memory = http_call(port_, "GET", "/headroom/memory").json();
  EXPECT_EQ(server.json()["budget"], memory["allocator"]["budget"]);  // null: the server's
  const uint64_t peak = server.json()["peak"];

  HttpResult sized = plan("8MiB");
  ASSERT_EQ(sized.status, 200) << sized.body;
  EXPECT_EQ(sized.json()["budget"], 8ull << 20);
  HttpResult bytes = plan(double(peak));
  ASSERT_EQ(bytes.status, 200) << bytes.body;
  EXPECT_EQ(bytes.json()["budget"], peak);
  EXPECT_EQ(bytes.json()["fits"], true);
  HttpResult tiny = plan(4096.0);
  ASSERT_EQ(tiny.status, 200) << tiny.body;
  EXPECT_EQ(tiny.json()["fits"], false);
  EXPECT_GT(tiny.json()["smallest_budget"].get<uint64_t>(), 4096u);

  EXPECT_EQ(plan("lots").status, 400);
  EXPECT_EQ(plan(-1.0).status, 400);
  EXPECT_EQ(plan(Json::array()).status, 400);
}

TEST_F(ServerTest, HistoryKeepsPlannedAndMeasuredPeaks) {
  const Json wf = tiny_workflow(64, 1);
  HttpResult planned = http_post_json(port_, "/headroom/plan", Json{{"prompt", wf}});
  ASSERT_EQ(planned.status, 200) << planned.body;
  const Json plan = planned.json();
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "peaks"));
  const std::string id = queue_prompt(wf, "peaks");
  std::vector<Json> seen;
  ASSERT_TRUE(ws.until_done(id, &seen));
  const Json h = http_call(port_, "GET", "/history/" + id).json()[id];
  ASSERT_EQ(h["status"]["status_str"], "success") << h.dump();
  const Json& mem = h["headroom"];
  EXPECT_EQ(mem["planned_peak"], plan["peak"]);
  uint64_t largest = 0;
  for (const Json& n : plan["nodes"]) {
    const std::string node = n["node_id"];
    ASSERT_TRUE(mem["nodes"].contains(node)) << node << " in " << mem.dump();
    const Json& m = mem["nodes"][node];
    EXPECT_EQ(m["class_type"], n["class_type"]);
    // The job's own plan (the worker's plan cache) may differ from this one by a workspace.
    EXPECT_EQ(m["planned_peak"].get<uint64_t>() > 0, n["peak"].get<uint64_t>() > 0) << node;
    EXPECT_GE(m["duration_ms"].get<double>(), 0.0);
    largest = std::max(largest, m["measured_peak"].get<uint64_t>());
  }
  EXPECT_GT(mem["nodes"]["3"]["measured_peak"].get<uint64_t>(), 0u);  // the sampler's arena
  EXPECT_EQ(mem["measured_peak"], largest);
  // Each node's record came live as it ended, equal to the history's.
  size_t live = 0;
  for (const Json& m : seen) {
    if (m["type"] != "headroom_node") continue;
    const Json& d = m["data"];
    EXPECT_EQ(d["prompt_id"], id);
    const std::string node = d["node"];
    EXPECT_EQ(d["measured_peak"], mem["nodes"][node]["measured_peak"]) << node;
    EXPECT_EQ(d["planned_peak"], mem["nodes"][node]["planned_peak"]) << node;
    ++live;
  }
  EXPECT_EQ(live, mem["nodes"].size());
  // The listing of all entries carries it too.
  EXPECT_EQ(http_call(port_, "GET", "/history").json()[id]["headroom"], mem);
}

TEST_F(ServerTest, NewLevelsAreSentAtOnce) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "levels"));
  ASSERT_TRUE(ws.until("vram_update", ""));
  ASSERT_EQ(http_post_json(port_, "/headroom/levels", Json{{"warning", 0.5}}).status, 200);
  // Idle, with nothing else moving, the next update is the one with the new levels.
  std::optional<Json> m;
  do {
    m = ws.until("vram_update", "", nullptr, std::chrono::seconds(5));
    ASSERT_TRUE(m) << "no vram_update with the new levels";
  } while ((*m)["data"]["warning_fraction"] != 0.5);
  EXPECT_EQ((*m)["data"]["danger_fraction"], 0.9);
}

}  // namespace
}  // namespace hr::test
