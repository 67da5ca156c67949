// ComfyUI's client flow against a running server: POST /prompt, the WebSocket messages until
// `executing` with node null, GET /history/{id}, GET /view; validation errors, interrupt, the
// headroom extras, and admission by plan (a job that cannot fit fails alone).
#include <gtest/gtest.h>

#include "server_fixture.h"

namespace hr::test {
namespace {

std::vector<std::string> types_of(const std::vector<Json>& msgs, const std::string& prompt_id) {
  std::vector<std::string> out;
  for (const Json& m : msgs)
    if (m["data"].is_object() && m["data"].value("prompt_id", "") == prompt_id)
      out.push_back(m["type"]);
  return out;
}

size_t index_of(const std::vector<std::string>& v, const std::string& s) {
  return size_t(std::find(v.begin(), v.end(), s) - v.begin());
}

TEST_F(ServerTest, ComfyClientFlow) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "flow-client"));
  std::optional<Json> hello = ws.next();
  ASSERT_TRUE(hello);  // always status first (ws_session.cpp)
  EXPECT_EQ((*hello)["type"], "status");
  EXPECT_EQ((*hello)["data"]["sid"], "flow-client");
  EXPECT_EQ((*hello)["data"]["status"]["exec_info"]["queue_remaining"], 0);

  HttpResult post = http_post_json(port_, "/prompt",
                                   Json{{"prompt", tiny_workflow()}, {"client_id", "flow-client"}});
  ASSERT_EQ(post.status, 200) << post.body;
  const Json pj = post.json();
  const std::string id = pj["prompt_id"];
  EXPECT_EQ(pj["number"], 0);
  EXPECT_EQ(pj["node_errors"], Json::object());

  std::vector<Json> seen;
  ASSERT_TRUE(ws.until_done(id, &seen)) << "no executing(null) for " << id;
  std::vector<std::string> t = types_of(seen, id);
  for (const char* want : {"execution_start", "execution_cached", "executing", "progress",
                           "executed", "execution_success"})
    EXPECT_NE(index_of(t, want), t.size()) << "missing " << want;
  EXPECT_LT(index_of(t, "execution_start"), index_of(t, "execution_cached"));
  EXPECT_LT(index_of(t, "execution_cached"), index_of(t, "executing"));
  EXPECT_LT(index_of(t, "executed"), index_of(t, "execution_success"));
  for (const Json& m : seen)
    if (m["type"] == "progress") {
      EXPECT_EQ(m["data"]["node"], "3");
      EXPECT_EQ(m["data"]["max"], 2);
    }

  HttpResult hist = http_call(port_, "GET", "/history/" + id);
  ASSERT_EQ(hist.status, 200);
  const Json h = hist.json()[id];
  EXPECT_EQ(h["status"]["status_str"], "success");
  EXPECT_EQ(h["status"]["completed"], true);
  EXPECT_EQ(h["prompt"][1], id);
  const Json img = h["outputs"]["9"]["images"][0];
  EXPECT_EQ(img["type"], "output");

  HttpResult view =
      http_call(port_, "GET",
                "/view?filename=" + img["filename"].get<std::string>() + "&subfolder=&type=output");
  ASSERT_EQ(view.status, 200);
  EXPECT_EQ(view.content_type, "image/png");
  EXPECT_EQ(view.body.substr(0, 4), "\x89PNG");
  EXPECT_NE(view.body.find("tEXtprompt"), std::string::npos);

  // The same routes under /api/, and the queue empty again.
  EXPECT_EQ(http_call(port_, "GET", "/api/history/" + id).json(), hist.json());
  EXPECT_EQ(http_call(port_, "GET", "/api/queue").json(),
            (Json{{"queue_running", Json::array()}, {"queue_pending", Json::array()}}));
  EXPECT_EQ(http_call(port_, "GET", "/prompt").json()["exec_info"]["queue_remaining"], 0);
  EXPECT_TRUE(ws.binaries.empty()) << "previews are off by default, as in ComfyUI";
}

class PreviewTest : public ServerTest {
  void configure(ServeOptions& o) override { o.preview_method = "latent2rgb"; }
};

// --preview-method latent2rgb: one binary frame per sampler step, in ComfyUI's layout
// (Note [preview frames]), holding a PNG at the latent's size, to the client that queued.
TEST_F(PreviewTest, BinaryPreviewFramesInComfyUisFormat) {
  WsReader ws, other;
  ASSERT_TRUE(ws.connect(port_, "preview-client"));
  ASSERT_TRUE(other.connect(port_, "someone-else"));
  const std::string id = queue_prompt(tiny_workflow(), "preview-client");
  ASSERT_TRUE(ws.until_done(id));
  ASSERT_EQ(ws.binaries.size(), 2u);  // steps: 2
  for (const std::string& f : ws.binaries) {
    ASSERT_GT(f.size(), 16u);
    EXPECT_EQ(f.substr(0, 8), std::string("\0\0\0\1\0\0\0\2", 8));  // PREVIEW_IMAGE, PNG
    EXPECT_EQ(f.substr(8, 4), "\x89PNG");
    // IHDR width and height (big-endian, bytes 16-23 of the PNG): 64 px / 8 = 8.
    EXPECT_EQ(uint8_t(f[8 + 19]), 8);
    EXPECT_EQ(uint8_t(f[8 + 23]), 8);
  }
  EXPECT_TRUE(other.until("status", "", nullptr, std::chrono::milliseconds(300)) ||
              other.binaries.empty());
  EXPECT_TRUE(other.binaries.empty()) << "previews go to the client that queued the prompt";
}

TEST(ServeOptionsTest, UnknownPreviewMethodIsRefusedByName) {
  ServeOptions o;
  o.device = "cpu";
  o.server.port = 0;
  o.database = ":memory:";
  o.preview_method = "taesd";
  Result<std::unique_ptr<ServeApp>> app = ServeApp::start(o);
  ASSERT_FALSE(app.ok());
  EXPECT_NE(app.status().message().find("taesd"), std::string::npos);
}

TEST_F(ServerTest, ValidationErrorsAreComfyUis400) {
  Json wf = tiny_workflow();
  wf["3"]["inputs"]["sampler_name"] = "no_such_sampler";
  HttpResult r = http_post_json(port_, "/prompt", Json{{"prompt", wf}});
  ASSERT_EQ(r.status, 400);
  const Json j = r.json();
  EXPECT_EQ(j["error"]["type"], "prompt_outputs_failed_validation");
  EXPECT_EQ(j["node_errors"]["3"]["errors"][0]["type"], "value_not_in_list");
  EXPECT_EQ(j["node_errors"]["3"]["class_type"], "KSampler");

  r = http_post_json(port_, "/prompt", Json{{"client_id", "x"}});
  ASSERT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["type"], "no_prompt");
  EXPECT_EQ(http_call(port_, "GET", "/queue").json()["queue_pending"].size(), 0u);
}

TEST_F(ServerTest, InterruptStopsTheJobAndTheNextRuns) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "int-client"));
  const std::string slow = queue_prompt(tiny_workflow(64, 1000, 1), "int-client");
  ASSERT_TRUE(ws.until("progress", slow));
  ASSERT_EQ(http_post_json(port_, "/interrupt", Json::object()).status, 200);
  std::vector<Json> seen;
  ASSERT_TRUE(ws.until_done(slow, &seen));
  std::vector<std::string> t = types_of(seen, slow);
  EXPECT_NE(index_of(t, "execution_interrupted"), t.size());
  EXPECT_EQ(http_call(port_, "GET", "/history/" + slow).json()[slow]["status"]["status_str"],
            "error");

  const std::string next = queue_prompt(tiny_workflow(64, 2, 2), "int-client");
  ASSERT_TRUE(ws.until_done(next));
  EXPECT_EQ(http_call(port_, "GET", "/history/" + next).json()[next]["status"]["status_str"],
            "success");
}

TEST_F(ServerTest, HeadroomExtras) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "extras"));
  const std::string id = queue_prompt(tiny_workflow(), "extras");
  std::vector<Json> seen;
  ASSERT_TRUE(ws.until_done(id, &seen));
  bool vram = false;
  for (const Json& m : seen)
    if (m["type"] == "vram_update") {
      vram = true;
      EXPECT_TRUE(m["data"]["allocator"].contains("activations"));
      EXPECT_TRUE(m["data"]["driver"].contains("used"));
    }
  EXPECT_TRUE(vram) << "no vram_update while the job ran";

  HttpResult metrics = http_call(port_, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("headroom_jobs_total{outcome=\"success\"} 1"), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("headroom_vram_bytes{lens=\"allocator\",segment=\"activations\"}"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("headroom_queue_pending 0"), std::string::npos);
  for (const char* m : {"headroom_streamed_bytes_total ", "headroom_oom_recoveries_total 0",
                        "headroom_weight_cache_bytes ", "headroom_weight_blocks_reused_total "})
    EXPECT_NE(metrics.body.find(m), std::string::npos) << m << " not in:\n" << metrics.body;

  Json mem = http_call(port_, "GET", "/headroom/memory").json();
  EXPECT_TRUE(mem["allocator"]["pools"].contains("activations"));
  EXPECT_TRUE(mem["allocator"]["pools"]["weights"].contains("cached"));
  EXPECT_GT(mem["loaded_models"].size(), 0u);

  HttpResult plan = http_post_json(port_, "/headroom/plan", Json{{"prompt", tiny_workflow()}});
  ASSERT_EQ(plan.status, 200) << plan.body;
  EXPECT_EQ(plan.json()["fits"], true);
  EXPECT_GT(plan.json()["peak"].get<uint64_t>(), 0u);

  Json stats = http_call(port_, "GET", "/system_stats").json();
  EXPECT_EQ(stats["devices"][0]["type"], server_test_device());
  EXPECT_TRUE(stats["devices"][0].contains("torch_vram_free"));
  EXPECT_TRUE(http_call(port_, "GET", "/object_info").json().contains("KSampler"));
  EXPECT_EQ(http_call(port_, "GET", "/object_info/KSampler").json()["KSampler"]["output"][0],
            "LATENT");
  EXPECT_EQ(http_call(port_, "GET", "/models/checkpoints").json(),
            Json::array({"tiny-sd1.safetensors"}));
  EXPECT_EQ(http_call(port_, "GET", "/models/nope").status, 404);
}

// Note [admission test budget]: on the CPU the tiny checkpoint's 64x64 workflow peaks at about
// 11.5 MiB (allocator level; VAE decode), while at 512x512 the UNet alone needs about 22.5 MiB
// (`headroom plan`), so a 16 MiB budget admits the first and rejects the second outright.
class TinyBudgetTest : public ServerTest {
  void configure(ServeOptions& o) override { o.memory.vram_budget = "16MiB"; }
};

TEST_F(TinyBudgetTest, JobThatCannotFitFailsAloneAndTheNextRuns) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "budget"));
  const std::string big = queue_prompt(tiny_workflow(512, 2), "budget");
  const std::string small = queue_prompt(tiny_workflow(64, 2), "budget");
  std::optional<Json> err = ws.until("execution_error", big);
  ASSERT_TRUE(err);
  // On the CPU (f32) the UNet is the first node that cannot fit; on CUDA (f16, half the weight
  // bytes) the sampler fits and the 512x512 VAE decode does not.
  const bool gpu = server_test_device() == "cuda";
  EXPECT_EQ((*err)["data"]["node_id"], gpu ? "8" : "3");
  EXPECT_EQ((*err)["data"]["node_type"], gpu ? "VAEDecode" : "KSampler");
  const std::string msg = (*err)["data"]["exception_message"];
  EXPECT_NE(msg.find("at least"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16.0 MiB"), std::string::npos) << msg;
  ASSERT_TRUE(ws.until_done(small));
  const Json hb = http_call(port_, "GET", "/history/" + big).json()[big];
  EXPECT_EQ(hb["status"]["status_str"], "error");
  EXPECT_TRUE(hb["outputs"].empty());
  EXPECT_EQ(http_call(port_, "GET", "/history/" + small).json()[small]["status"]["status_str"],
            "success");
  EXPECT_NE(
      http_call(port_, "GET", "/metrics").body.find("headroom_jobs_total{outcome=\"rejected\"} 1"),
      std::string::npos);
}

}  // namespace
}  // namespace hr::test
