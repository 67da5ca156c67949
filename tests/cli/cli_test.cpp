// End-to-end tests of the headroom binary: make-model, run (the example workflow on a tiny
// checkpoint: PNG size and prompt metadata) and malformed workflows (exit code 2, no crash).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/png_io.h"
#include "run_cmd.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using test::CmdResult;
using test::file_read;
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

  // The command line of `headroom run` on `wf`, written to <name>.json.
  std::string run_line(const Json& wf, const std::string& name, bool quiet = true) {
    fs::path p = root_ / (name + ".json");
    std::ofstream(p) << wf.dump();
    return test::headroom_binary() + " run" + (quiet ? " --quiet" : "") +
           " --device cpu --threads 2 --models-dir " + (root_ / "models").string() +
           " --output-dir " + (root_ / "out").string() + " " + p.string();
  }

  CmdResult run_workflow(const Json& wf, const std::string& name) {
    return run_cmd(run_line(wf, name));
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

// Progress goes to stderr, as plain lines when it is not a terminal (Note [run progress]): each
// node with its time, the sampler's bar at every tenth of its steps, the total; stdout keeps only
// the PNG paths; --quiet leaves stderr empty.
TEST_F(CliTest, RunShowsProgressOnStderr) {
  Json wf = example();
  wf["3"]["inputs"]["steps"] = 12;
  wf["9"]["inputs"]["filename_prefix"] = "progress/p";
  const std::string err = (root_ / "progress.err").string();
  std::string cmd = "(";  // stdout: the PNG paths; stderr, the progress, goes to a file
  cmd += run_line(wf, "progress", false) + " 2>" + err + ")";
  CmdResult r = run_cmd(cmd);
  ASSERT_EQ(r.code, 0) << r.output << file_read(err);
  EXPECT_EQ(r.output, (root_ / "out/progress/p_00001_.png").string() + "\n");
  const std::string progress = file_read(err);
  EXPECT_EQ(progress.find('\r'), std::string::npos) << progress;
  const char* nodes[] = {"4 CheckpointLoaderSimple", "6 CLIPTextEncode", "7 CLIPTextEncode",
                         "5 EmptyLatentImage", "3 KSampler", "8 VAEDecode", "9 SaveImage"};
  for (const char* node : nodes) {
    const std::string line = std::string("node ") + node;
    EXPECT_NE(progress.find(line + "\n"), std::string::npos) << line << " in:\n" << progress;
    EXPECT_NE(progress.find(line + " done in "), std::string::npos) << line << " in:\n" << progress;
  }
  EXPECT_NE(progress.find("[7/7] node "), std::string::npos) << progress;
  const size_t last = progress.find("node 3 KSampler 100%|##########| 12/12 [");
  ASSERT_NE(last, std::string::npos) << progress;
  const std::string bar = progress.substr(last, progress.find('\n', last) - last);
  EXPECT_TRUE(bar.ends_with("it/s]") || bar.ends_with("s/it]")) << bar;
  size_t bars = 0;
  for (size_t at = progress.find("%|"); at != std::string::npos; at = progress.find("%|", at + 1))
    ++bars;
  // 12 steps, a line per tenth: 1/12 is below the first tenth, 7/12 in the same one as 6/12.
  EXPECT_EQ(bars, 10u) << progress;
  EXPECT_NE(progress.find("headroom: prompt executed in "), std::string::npos) << progress;

  cmd = "(";
  cmd += run_line(wf, "progress_quiet") + " 2>" + err + ")";
  r = run_cmd(cmd);
  ASSERT_EQ(r.code, 0) << r.output << file_read(err);
  EXPECT_EQ(r.output, (root_ / "out/progress/p_00002_.png").string() + "\n");
  EXPECT_EQ(file_read(err), "");
}

TEST_F(CliTest, MalformedWorkflowsExitWithCode2) {
  {
    fs::path p = root_ / "notjson.json";
    std::ofstream(p) << "{\"3\": {";
    CmdResult r = run_cmd(test::headroom_binary() + " run --quiet " + p.string());
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("not valid JSON"), std::string::npos) << r.output;
  }
  {  // issue 35: nesting past the limit is refused before anything recurses into it
    fs::path p = root_ / "deep.json";
    std::ofstream(p) << "{\"3\": {\"x\": " << std::string(100000, '[') << std::string(100000, ']')
                     << "}}";
    for (const char* cmd : {" run --quiet ", " plan "}) {
      CmdResult r = run_cmd(test::headroom_binary() + cmd + p.string());
      EXPECT_EQ(r.code, 2) << cmd << r.output;
      EXPECT_NE(r.output.find("JSON nested deeper than 256 levels"), std::string::npos) << r.output;
    }
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

// make-model --arch flux writes a ComfyUI models folder (the DiT, both text encoders, the VAE and
// the single-file checkpoint); the folder is the option, not a file.
TEST_F(CliTest, MakeModelFluxWritesAModelsFolder) {
  const fs::path dir = root_ / "flux_models";
  CmdResult r = run_cmd(test::headroom_binary() + " make-model --arch flux --size tiny --seed 4 " +
                        "--out-dir " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* f : {"diffusion_models/flux1-dev.safetensors",
                        "text_encoders/t5xxl_fp16.safetensors", "text_encoders/clip_l.safetensors",
                        "vae/ae.safetensors", "checkpoints/flux1-dev-all.safetensors"})
    EXPECT_TRUE(fs::exists(dir / f)) << f << "\n" << r.output;
  r = run_cmd(test::headroom_binary() + " models " + (dir / "diffusion_models/flux1-dev.safetensors").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("family flux"), std::string::npos) << r.output;
  r = run_cmd(test::headroom_binary() + " make-model --arch flux --size tiny -o " +
              (root_ / "one.safetensors").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--out-dir"), std::string::npos) << r.output;
  // --no-checkpoint: the component files alone (the full-size checkpoint would double the disk).
  const fs::path bare = root_ / "flux_models_bare";
  r = run_cmd(test::headroom_binary() + " make-model --arch flux --size tiny --no-checkpoint " +
              "--out-dir " + bare.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(bare / "diffusion_models/flux1-dev.safetensors")) << r.output;
  EXPECT_FALSE(fs::exists(bare / "checkpoints/flux1-dev-all.safetensors")) << r.output;
  EXPECT_EQ(r.output.find("checkpoints"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hr
