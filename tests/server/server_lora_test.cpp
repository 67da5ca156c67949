// The LoRA nodes through the server: /object_info as ComfyUI's nodes.py declares them,
// /models/loras, /headroom/plan, and LoRA jobs that warn or fail alone while the queue goes on.
#include <gtest/gtest.h>

#include <fstream>

#include "server_fixture.h"

namespace hr::test {
namespace {

namespace fs = std::filesystem;

class LoraServerTest : public ServerTest {
 protected:
  // models/loras: two of tests/data/lora's files and a truncated copy of one.
  void configure(ServeOptions& o) override {
    const fs::path loras = fs::path(o.models_dir) / "loras";
    fs::create_directories(loras);
    for (const char* f : {"sd1_stack_a.safetensors", "sd1_kohya.safetensors"})
      fs::create_symlink(data_path(std::string("lora/") + f), loras / f);
    std::ifstream in(data_path("lora/sd1_stack_a.safetensors"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(loras / "broken.safetensors", std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size() / 2));
  }

  // tiny_workflow with a LoraLoader between the checkpoint and the sampler / text encoders.
  static Json lora_workflow(const std::string& lora) {
    Json wf = tiny_workflow();
    wf["10"] = {{"class_type", "LoraLoader"},
                {"inputs",
                 {{"model", {"4", 0}},
                  {"clip", {"4", 1}},
                  {"lora_name", lora},
                  {"strength_model", 0.75},
                  {"strength_clip", 1.25}}}};
    wf["3"]["inputs"]["model"] = {"10", 0};
    wf["6"]["inputs"]["clip"] = {"10", 1};
    wf["7"]["inputs"]["clip"] = {"10", 1};
    return wf;
  }

  static const std::vector<std::string>& lora_files() {
    static const std::vector<std::string> files = {"broken.safetensors", "sd1_kohya.safetensors",
                                                   "sd1_stack_a.safetensors"};
    return files;
  }
};

// ComfyUI's ("FLOAT", {"default": 1.0, "min": -100.0, "max": 100.0, "step": 0.01}).
void expect_strength(const Json& spec, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(spec.is_array() && spec.size() == 2) << spec.dump();
  EXPECT_EQ(spec[0], "FLOAT");
  EXPECT_DOUBLE_EQ(spec[1]["default"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(spec[1]["min"].get<double>(), -100.0);
  EXPECT_DOUBLE_EQ(spec[1]["max"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(spec[1]["step"].get<double>(), 0.01);
}

TEST_F(LoraServerTest, ObjectInfoHasComfyUIsLoraNodes) {
  const Json all = http_call(port_, "GET", "/object_info").json();
  ASSERT_TRUE(all.contains("LoraLoader"));
  ASSERT_TRUE(all.contains("LoraLoaderModelOnly"));

  const Json both = http_call(port_, "GET", "/object_info/LoraLoader").json()["LoraLoader"];
  EXPECT_EQ(both, all["LoraLoader"]);
  const Json& req = both["input"]["required"];
  EXPECT_EQ(req.size(), 5u) << req.dump();
  EXPECT_EQ(req["model"], Json::array({"MODEL"}));
  EXPECT_EQ(req["clip"], Json::array({"CLIP"}));
  EXPECT_EQ(req["lora_name"][0], Json(lora_files()));
  expect_strength(req["strength_model"], "strength_model");
  expect_strength(req["strength_clip"], "strength_clip");
  EXPECT_FALSE(both["input"].contains("optional"));
  EXPECT_EQ(both["input_order"]["required"],
            Json::array({"model", "clip", "lora_name", "strength_model", "strength_clip"}));
  EXPECT_EQ(both["output"], Json::array({"MODEL", "CLIP"}));
  EXPECT_EQ(both["output_name"], Json::array({"MODEL", "CLIP"}));
  EXPECT_EQ(both["output_is_list"], Json::array({false, false}));
  EXPECT_EQ(both["name"], "LoraLoader");
  EXPECT_EQ(both["display_name"], "Load LoRA");  // NODE_DISPLAY_NAME_MAPPINGS
  EXPECT_EQ(both["category"], "loaders");
  EXPECT_EQ(both["output_node"], false);

  const Json only =
      http_call(port_, "GET", "/object_info/LoraLoaderModelOnly").json()["LoraLoaderModelOnly"];
  const Json& oreq = only["input"]["required"];
  EXPECT_EQ(oreq.size(), 3u) << oreq.dump();
  EXPECT_EQ(oreq["model"], Json::array({"MODEL"}));
  EXPECT_EQ(oreq["lora_name"][0], Json(lora_files()));
  expect_strength(oreq["strength_model"], "strength_model");
  EXPECT_EQ(only["input_order"]["required"], Json::array({"model", "lora_name", "strength_model"}));
  EXPECT_EQ(only["output"], Json::array({"MODEL"}));
  EXPECT_EQ(only["output_name"], Json::array({"MODEL"}));
  EXPECT_EQ(only["name"], "LoraLoaderModelOnly");
  EXPECT_EQ(only["display_name"], "LoraLoaderModelOnly");  // no display-name mapping in ComfyUI
  EXPECT_EQ(only["category"], "loaders");
}

TEST_F(LoraServerTest, ModelsRouteListsTheLorasFolder) {
  const Json folders = http_call(port_, "GET", "/models").json();
  EXPECT_NE(std::find(folders.begin(), folders.end(), Json("loras")), folders.end())
      << folders.dump();
  EXPECT_EQ(http_call(port_, "GET", "/models/loras").json(), Json(lora_files()));
  // A file added while the server runs is listed, and offered by the nodes, at the next request.
  fs::create_symlink(data_path("lora/sd1_stack_b.safetensors"),
                     dir_ / "models/loras/sd1_stack_b.safetensors");
  std::vector<std::string> now = lora_files();
  now.push_back("sd1_stack_b.safetensors");
  EXPECT_EQ(http_call(port_, "GET", "/models/loras").json(), Json(now));
  EXPECT_EQ(http_call(port_, "GET", "/object_info/LoraLoader")
                .json()["LoraLoader"]["input"]["required"]["lora_name"][0],
            Json(now));
}

// A job with a LoRA whose two keys match nothing runs and tells the client (headroom_warning);
// a job with a truncated LoRA fails naming the file, and the job queued after it runs.
TEST_F(LoraServerTest, LoraJobsWarnFailAloneAndTheQueueGoesOn) {
  WsReader ws;
  ASSERT_TRUE(ws.connect(port_, "lora"));
  const std::string kohya = queue_prompt(lora_workflow("sd1_kohya.safetensors"), "lora");
  const std::string broken = queue_prompt(lora_workflow("broken.safetensors"), "lora");
  const std::string after = queue_prompt(lora_workflow("sd1_stack_a.safetensors"), "lora");

  // Each job's messages up to `executing` with node null (when ComfyUI clients read /history).
  auto messages = [&ws](const std::string& id) {
    std::vector<Json> seen;
    EXPECT_TRUE(ws.until_done(id, &seen)) << "no executing(null) for " << id;
    std::vector<Json> out;
    for (const Json& m : seen)
      if (m["data"].is_object() && m["data"].value("prompt_id", "") == id) out.push_back(m);
    return out;
  };
  auto of_type = [](const std::vector<Json>& msgs, const std::string& type) {
    std::vector<Json> out;
    for (const Json& m : msgs)
      if (m["type"] == type) out.push_back(m["data"]);
    return out;
  };

  const std::vector<Json> k = messages(kohya);
  EXPECT_EQ(of_type(k, "execution_success").size(), 1u);
  const std::vector<Json> warnings = of_type(k, "headroom_warning");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0]["node"], "10");
  const std::string msg = warnings[0]["message"];
  EXPECT_NE(msg.find("2 lora key(s) not loaded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lora_unet_not_a_block.lora_up.weight"), std::string::npos) << msg;

  const std::vector<Json> errors = of_type(messages(broken), "execution_error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["node_id"], "10");
  EXPECT_EQ(errors[0]["node_type"], "LoraLoader");
  const std::string text = errors[0]["exception_message"];
  EXPECT_NE(text.find("broken.safetensors"), std::string::npos) << text;

  const std::vector<Json> a = messages(after);
  EXPECT_EQ(of_type(a, "execution_success").size(), 1u);
  EXPECT_TRUE(of_type(a, "headroom_warning").empty());
  const Json hist = http_call(port_, "GET", "/history/" + after).json();
  ASSERT_TRUE(hist.contains(after)) << hist.dump();
  EXPECT_EQ(hist.at(after).at("outputs").at("9").at("images").size(), 1u) << hist.dump();
}

// /headroom/plan plans a workflow with a LoRA (a plan run reads the LoRA file, Note [LoRA files
// in a plan run] in nodes_lora.cpp) and lists the LoRA node.
TEST_F(LoraServerTest, PlanRouteTakesALoraWorkflow) {
  HttpResult plan = http_post_json(port_, "/headroom/plan",
                                   Json{{"prompt", lora_workflow("sd1_stack_a.safetensors")}});
  ASSERT_EQ(plan.status, 200) << plan.body;
  const Json j = plan.json();
  EXPECT_EQ(j["fits"], true);
  EXPECT_GT(j["peak"].get<uint64_t>(), 0u);
  std::vector<std::string> classes;
  for (const Json& n : j["nodes"]) classes.push_back(n["class_type"]);
  EXPECT_NE(std::find(classes.begin(), classes.end(), "LoraLoader"), classes.end()) << j.dump();
}

}  // namespace
}  // namespace hr::test
