// End-to-end tests of the headroom binary: make-model, run (the example workflow on a tiny
// checkpoint: PNG size and prompt metadata) and malformed workflows (exit code 2, no crash).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "nodes/png_io.h"
#include "run_cmd.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using test::CmdResult;
using test::run_cmd;

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("headroom_cli_" + std::to_string(getpid()));
    fs::create_directories(root_ / "models" / "checkpoints");
    CmdResult r = run_cmd(test::headroom_binary() + " make-model --arch sd1 --size tiny --seed 1 -o " +
                          (root_ / "models/checkpoints/headroom-tiny-sd1.safetensors").string());
    ASSERT_EQ(r.code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static Json example() {
    std::ifstream f(test::source_dir() + "/examples/default_workflow.json");
    Json j = Json::parse(f);
    j["5"]["inputs"]["width"] = 64;
    j["5"]["inputs"]["height"] = 64;
    j["3"]["inputs"]["steps"] = 3;
    return j;
  }

  CmdResult run_workflow(const Json& wf, const std::string& name) {
    fs::path p = root_ / (name + ".json");
    std::ofstream(p) << wf.dump();
    return run_cmd(test::headroom_binary() + " run --quiet --device cpu --threads 2 --models-dir " +
                   (root_ / "models").string() + " --output-dir " + (root_ / "out").string() + " " +
                   p.string());
  }

  void expect_invalid(const Json& wf, const std::string& name, const std::string& needle) {
    CmdResult r = run_workflow(wf, name);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.output;
  }

  static fs::path root_;
};
fs::path CliTest::root_;

TEST_F(CliTest, VersionAndModels) {
  CmdResult r = run_cmd(test::headroom_binary() + " --version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("headroom"), std::string::npos);
  r = run_cmd(test::headroom_binary() + " models --models-dir " + (root_ / "models").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sd1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("params"), std::string::npos) << r.output;
}

TEST_F(CliTest, RunsExampleAndWritesPngWithPrompt) {
  Json wf = example();
  CmdResult r = run_workflow(wf, "example");
  ASSERT_EQ(r.code, 0) << r.output;
  fs::path png = root_ / "out" / "ComfyUI_00001_.png";
  ASSERT_TRUE(fs::exists(png)) << r.output;
  Result<Image8> img = png_read(png.string());
  ASSERT_TRUE(img.ok()) << img.status().str();
  EXPECT_EQ(img->width, 64);
  EXPECT_EQ(img->height, 64);
  std::string prompt;
  for (auto& [k, v] : img->text)
    if (k == "prompt") prompt = v;
  ASSERT_FALSE(prompt.empty());
  EXPECT_EQ(Json::parse(prompt)["4"]["inputs"]["ckpt_name"], "headroom-tiny-sd1.safetensors");
  // The image is not flat: random weights still give varying pixels.
  int lo = 255, hi = 0;
  for (uint8_t v : img->pixels) {
    lo = std::min<int>(lo, v);
    hi = std::max<int>(hi, v);
  }
  EXPECT_LT(lo, hi);
  // A second run numbers the next file.
  r = run_workflow(wf, "example2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(root_ / "out" / "ComfyUI_00002_.png"));
}

TEST_F(CliTest, MalformedWorkflowsExitWithCode2) {
  {
    fs::path p = root_ / "notjson.json";
    std::ofstream(p) << "{\"3\": {";
    CmdResult r = run_cmd(test::headroom_binary() + " run --quiet " + p.string());
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("not valid JSON"), std::string::npos) << r.output;
  }
  Json wf = example();
  wf["8"]["class_type"] = "NoSuchNode";
  expect_invalid(wf, "unknown", "NoSuchNode does not exist");

  wf = example();
  wf["8"]["inputs"]["samples"] = Json::array({"42", 0});
  expect_invalid(wf, "missing_link", "bad_linked_input");

  wf = example();
  wf["8"]["inputs"]["samples"] = Json::array({"3", 5});
  expect_invalid(wf, "bad_index", "out of range");

  wf = example();
  wf["8"]["inputs"]["samples"] = Json::array({"4", 0});
  expect_invalid(wf, "type_mismatch", "return_type_mismatch");

  wf = example();
  wf["5"]["inputs"]["width"] = -64;
  expect_invalid(wf, "negative", "value_smaller_than_min");

  wf = example();
  wf["5"]["inputs"]["width"] = 100;
  expect_invalid(wf, "not_multiple", "not a multiple of 8");

  wf = example();
  wf["5"]["inputs"]["width"] = 100000;
  wf["5"]["inputs"]["height"] = 100000;
  expect_invalid(wf, "huge", "value_bigger_than_max");

  wf = example();
  wf["4"]["inputs"]["ckpt_name"] = "missing.safetensors";
  expect_invalid(wf, "missing_model", "value_not_in_list");

  wf = example();
  wf["3"]["inputs"]["sampler_name"] = "not_a_sampler";
  expect_invalid(wf, "bad_sampler", "value_not_in_list");

  // A cycle: the sampler's latent comes from its own output through a VAE round trip.
  wf = example();
  wf["10"] = Json{{"class_type", "VAEEncode"}, {"inputs", {{"pixels", {"8", 0}}, {"vae", {"4", 2}}}}};
  wf["3"]["inputs"]["latent_image"] = Json::array({"10", 0});
  expect_invalid(wf, "cycle", "cycle");

  wf = example();
  wf.erase("9");
  expect_invalid(wf, "no_outputs", "prompt_no_outputs");
}

TEST_F(CliTest, SdxlTinyWithSdxlTextEncode) {
  fs::path model = root_ / "models/checkpoints/headroom-tiny-sdxl.safetensors";
  CmdResult r = run_cmd(test::headroom_binary() + " make-model --arch sdxl --size tiny --seed 2 -o " + model.string());
  ASSERT_EQ(r.code, 0) << r.output;
  Json wf = example();
  wf["4"]["inputs"]["ckpt_name"] = "headroom-tiny-sdxl.safetensors";
  wf["6"] = Json{{"class_type", "CLIPTextEncodeSDXL"},
                 {"inputs", {{"clip", {"4", 1}}, {"width", 1024}, {"height", 1024}, {"crop_w", 0},
                             {"crop_h", 0}, {"target_width", 1024}, {"target_height", 1024},
                             {"text_g", "a photo of a cat"}, {"text_l", "a cat"}}}};
  wf["9"]["inputs"]["filename_prefix"] = "sdxl/test";
  r = run_workflow(wf, "sdxl");
  ASSERT_EQ(r.code, 0) << r.output;
  Result<Image8> img = png_read((root_ / "out/sdxl/test_00001_.png").string());
  ASSERT_TRUE(img.ok()) << img.status().str() << "\n" << r.output;
  EXPECT_EQ(img->width, 64);
}

TEST_F(CliTest, CorruptCheckpointFailsWithExitCode3) {
  fs::path bad = root_ / "models/checkpoints/corrupt.safetensors";
  {
    std::ofstream f(bad, std::ios::binary);
    uint64_t n = 1000000;  // header length far past the end of the file
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  Json wf = example();
  wf["4"]["inputs"]["ckpt_name"] = "corrupt.safetensors";
  CmdResult r = run_workflow(wf, "corrupt");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("corrupt.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node 4 (CheckpointLoaderSimple)"), std::string::npos) << r.output;
  fs::remove(bad);
}

TEST_F(CliTest, MissingWorkflowFile) {
  CmdResult r = run_cmd(test::headroom_binary() + " run --quiet /nonexistent/workflow.json");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot open"), std::string::npos);
}

// `headroom models` says where each setting the weights cannot show came from: a config file
// beside the checkpoint, headroom's metadata (make-model), or detection.
TEST_F(CliTest, ModelsSaysWhereSettingsCameFrom) {
  CmdResult cfg = run_cmd(test::headroom_binary() + " models " + test::golden_path("tiny-sd1.safetensors"));
  ASSERT_EQ(cfg.code, 0) << cfg.output;
  EXPECT_NE(cfg.output.find("num_heads 8 (config "), std::string::npos) << cfg.output;
  EXPECT_NE(cfg.output.find("clip_l heads         4 (config "), std::string::npos) << cfg.output;

  CmdResult meta = run_cmd(test::headroom_binary() + " models " +
                           (root_ / "models/checkpoints/headroom-tiny-sd1.safetensors").string());
  ASSERT_EQ(meta.code, 0) << meta.output;
  EXPECT_NE(meta.output.find("(metadata headroom.unet.num_heads)"), std::string::npos) << meta.output;
  EXPECT_NE(meta.output.find("(metadata headroom.clip.heads)"), std::string::npos) << meta.output;

  // The same weights without their config: detection (width / 64), which is wrong for them.
  fs::path bare = root_ / "bare-tiny-sd1.safetensors";
  fs::create_symlink(test::golden_path("tiny-sd1.safetensors"), bare);
  CmdResult det = run_cmd(test::headroom_binary() + " models " + bare.string());
  ASSERT_EQ(det.code, 0) << det.output;
  EXPECT_NE(det.output.find("config file: none"), std::string::npos) << det.output;
  EXPECT_NE(det.output.find("1 (detected: width 32 / 64)"), std::string::npos) << det.output;
  EXPECT_NE(det.output.find("prediction           eps (default)"), std::string::npos) << det.output;
}

// The README's example (256x256, one step to keep it short) on a tiny f32 checkpoint under a
// 40 MiB budget: the VAE decode's plan does not fit, so it tiles, says so, and the allocator
// never holds more than the budget; under 12 MiB it also streams weights. Under 1 MiB nothing
// fits: exit 3 naming the segments.
TEST_F(CliTest, RunUnderABudgetTilesTheVAEAndSaysSo) {
  fs::path ckpt = root_ / "models/checkpoints/tiny-f32.safetensors";
  CmdResult mk = run_cmd(test::headroom_binary() + " make-model --arch sd1 --size tiny --seed 0 "
                         "--dtype f32 -o " + ckpt.string());
  ASSERT_EQ(mk.code, 0) << mk.output;
  std::ifstream f(test::source_dir() + "/examples/default_workflow.json");
  Json wf = Json::parse(f);
  wf["4"]["inputs"]["ckpt_name"] = "tiny-f32.safetensors";
  wf["3"]["inputs"]["steps"] = 1;
  fs::path p = root_ / "budget.json";
  std::ofstream(p) << wf.dump();
  const std::string cmd = test::headroom_binary() + " run --device cpu --threads 2 --models-dir " +
                          (root_ / "models").string() + " --output-dir " +
                          (root_ / "out").string() + " " + p.string() + " --vram-budget ";
  CmdResult r = run_cmd(cmd + "40MiB");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("budget 40.0 MiB (--vram-budget 40MiB)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("VAEDecode: VAE decode tiled"), std::string::npos) << r.output;
  // The room is the budget less the decoder's own weights (counted on the CPU too).
  EXPECT_NE(r.output.find("MiB left; tile arena"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("streams"), std::string::npos) << "nothing streams at 40 MiB\n"
                                                          << r.output;
  auto peak_of = [](const std::string& out) {
    size_t at = out.find("allocator level: peak ");
    return at == std::string::npos ? 1e9 : std::stod(out.substr(at + 22));
  };
  EXPECT_LE(peak_of(r.output), 40.0) << r.output;
  EXPECT_NE(r.output.find("driver level ("), std::string::npos) << r.output;

  // 12 MiB: the UNet's weights and arena (17.9 MiB) do not fit, so weights stream through the
  // staging ring; the decoder tiles at 64 px and streams its weights too.
  CmdResult s = run_cmd(cmd + "12MiB");
  ASSERT_EQ(s.code, 0) << s.output;
  EXPECT_NE(s.output.find("KSampler: UNet streams "), std::string::npos) << s.output;
  EXPECT_NE(s.output.find("VAEDecode: VAE decode tiled"), std::string::npos) << s.output;
  EXPECT_NE(s.output.find("(weights streamed:"), std::string::npos) << s.output;
  EXPECT_LE(peak_of(s.output), 12.0) << s.output;
  EXPECT_NE(s.output.find("staging "), std::string::npos) << s.output;

  CmdResult tiny = run_cmd(cmd + "1MiB");
  EXPECT_EQ(tiny.code, 3) << tiny.output;
  EXPECT_NE(tiny.output.find("out of memory"), std::string::npos) << tiny.output;
  EXPECT_NE(tiny.output.find("budget 1.0 MiB"), std::string::npos) << tiny.output;

  CmdResult bad = run_cmd(cmd + "lots");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("'lots' is not a size"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace hr
