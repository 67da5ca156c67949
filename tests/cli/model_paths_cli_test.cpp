// `headroom run` and `headroom models` with symlinked models and --extra-model-paths-config
// (repeatable, ComfyUI's extra_model_paths.yaml): the example workflow runs on a checkpoint
// reached through links and an extra folder; a malformed file exits 2 naming itself.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_cmd.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using test::CmdResult;
using test::run_cmd;

class ModelPathsCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("headroom_model_paths_cli_" + std::to_string(getpid()));
    fs::remove_all(root_);
    // models/ holds nothing; the checkpoint lives in a store reached through an extra folder
    // (second config) whose sub-folder "linked" is a link, holding a link to the file.
    fs::create_directories(root_ / "models");
    fs::create_directories(root_ / "store");
    fs::create_directories(root_ / "extra/checkpoints");
    fs::create_symlink(test::golden_path("tiny-sd1.safetensors"),
                       root_ / "store/my-sd1.safetensors");
    fs::create_symlink(root_ / "store", root_ / "extra/checkpoints/linked");
    std::ofstream(root_ / "vae.yaml") << "first:\n  base_path: extra\n  vae: vae\n";
    std::ofstream(root_ / "ckpt.yaml") << "second:\n  base_path: .\n  checkpoints: |\n"
                                          "    missing_dir\n    extra/checkpoints\n";
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static std::string extra_configs() {
    return " --extra-model-paths-config " + (root_ / "vae.yaml").string() +
           " --extra-model-paths-config " + (root_ / "ckpt.yaml").string();
  }

  static fs::path write_workflow(const std::string& ckpt_name, const std::string& file) {
    std::ifstream f(test::source_dir() + "/examples/default_workflow.json");
    Json j = Json::parse(f);
    j["4"]["inputs"]["ckpt_name"] = ckpt_name;
    j["5"]["inputs"]["width"] = 64;
    j["5"]["inputs"]["height"] = 64;
    j["3"]["inputs"]["steps"] = 2;
    fs::path p = root_ / file;
    std::ofstream(p) << j.dump();
    return p;
  }

  static std::string run_prefix() {
    return test::headroom_binary() + " run --quiet --device cpu --threads 2 --models-dir " +
           (root_ / "models").string() + " --output-dir " + (root_ / "out").string();
  }

  static fs::path root_;
};
fs::path ModelPathsCliTest::root_;

TEST_F(ModelPathsCliTest, ModelsListsCheckpointsUnderLinkNames) {
  CmdResult r = run_cmd(test::headroom_binary() + " models --models-dir " +
                        (root_ / "models").string() + extra_configs());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find((root_ / "extra/checkpoints/linked/my-sd1.safetensors").string()),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("sd1"), std::string::npos) << r.output;
  // Without the configs the models folder alone holds nothing.
  r = run_cmd(test::headroom_binary() + " models --models-dir " + (root_ / "models").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no models under"), std::string::npos) << r.output;
}

TEST_F(ModelPathsCliTest, RunsWorkflowNamingSymlinkedCheckpointInExtraFolder) {
  fs::path wf = write_workflow("linked/my-sd1.safetensors", "linked.json");
  // The workflow file comes after the repeated option: each occurrence takes one file.
  CmdResult r = run_cmd(run_prefix() + extra_configs() + " " + wf.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(root_ / "out/ComfyUI_00001_.png")) << r.output;
  // Without the config the same workflow fails validation (exit 2) naming the checkpoint.
  r = run_cmd(run_prefix() + " " + wf.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("linked/my-sd1.safetensors"), std::string::npos) << r.output;
}

TEST_F(ModelPathsCliTest, MalformedConfigExitsWithCode2NamingTheFile) {
  fs::path bad = root_ / "bad.yaml";
  std::ofstream(bad) << "sec:\n  checkpoints: [a, b]\n";
  fs::path wf = write_workflow("linked/my-sd1.safetensors", "bad.json");
  CmdResult r =
      run_cmd(run_prefix() + " --extra-model-paths-config " + bad.string() + " " + wf.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(bad.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'checkpoints'"), std::string::npos) << r.output;
  r = run_cmd(test::headroom_binary() + " models --extra-model-paths-config " +
              (root_ / "no-such.yaml").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no-such.yaml"), std::string::npos) << r.output;
  std::ofstream(bad) << "sec: [unclosed\n";
  r = run_cmd(test::headroom_binary() + " models --extra-model-paths-config " + bad.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("not valid YAML"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hr
