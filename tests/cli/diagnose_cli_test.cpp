// The diagnosis commands end to end: `headroom probe` (host only without a GPU), `headroom
// bench` on the tiny checkpoint in three modes under a small budget, and `plan --explain`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_cmd.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using hr::test::CmdResult;
using hr::test::file_read;
using hr::test::run_cmd;

bool looks_like_svg(const std::string& s) {
  return s.rfind("<?xml", 0) == 0 && s.find("<svg") != std::string::npos && s.size() > 7 &&
         s.compare(s.size() - 7, 7, "</svg>\n") == 0;
}

class DiagnoseCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("headroom_diagnose_cli_" + std::to_string(getpid()));
    fs::create_directories(root_ / "models/checkpoints");
    CmdResult r =
        run_cmd(hr::test::headroom_binary() + " make-model --arch sd1 --size tiny --seed 0 -o " +
                (root_ / "models/checkpoints/headroom-tiny-sd1.safetensors").string());
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream f(hr::test::source_dir() + "/examples/default_workflow.json");
    Json wf = Json::parse(f);
    wf["5"]["inputs"]["width"] = 64;
    wf["5"]["inputs"]["height"] = 64;
    wf["3"]["inputs"]["steps"] = 1;
    std::ofstream(root_ / "wf.json") << wf.dump();
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static std::string bench(const std::string& extra) {
    return hr::test::headroom_binary() + " bench " + (root_ / "wf.json").string() +
           " --device cpu --threads 2 --models-dir " + (root_ / "models").string() +
           " --output-dir " + (root_ / "out").string() + " " + extra;
  }
  static std::string plan(const std::string& extra) {
    return hr::test::headroom_binary() + " plan " + (root_ / "wf.json").string() +
           " --explain --models-dir " + (root_ / "models").string() + " " + extra;
  }

  static fs::path root_;
};
fs::path DiagnoseCli::root_;

// Large blocks and no move keep this quick where a GPU is present (it then probes the card).
const char* kProbeFlags = " probe --block-mib 4096 --fraction 0 --bandwidth-mib 16";

TEST_F(DiagnoseCli, ProbeWithoutGpuSaysSoAndMeasuresHostMemory) {
  CmdResult j = run_cmd(hr::test::headroom_binary() + kProbeFlags + " --json", true);
  ASSERT_EQ(j.code, 0) << j.output;
  Json p = Json::parse(j.output);
  EXPECT_GT(p["host"]["memcpy"]["gb_per_s"].get<double>(), 0);
  EXPECT_GT(p["host"]["ram_total"].get<uint64_t>(), 0u);
  const fs::path svg = root_ / "probe.svg";
  CmdResult t = run_cmd(hr::test::headroom_binary() + kProbeFlags + " --plot " + svg.string());
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("host memory bandwidth"), std::string::npos) << t.output;
  EXPECT_TRUE(looks_like_svg(file_read(svg)));
  if (p["gpu"].get<bool>()) {  // a GPU machine: the device figures are there instead
    EXPECT_GT(p["fill"]["blocks"].get<uint64_t>(), 0u);
    EXPECT_NE(t.output.find("fill:"), std::string::npos) << t.output;
    return;
  }
  EXPECT_FALSE(p["no_gpu_reason"].get<std::string>().empty());
  EXPECT_FALSE(p.contains("fill"));
  EXPECT_NE(t.output.find("no GPU"), std::string::npos) << t.output;
}

TEST_F(DiagnoseCli, ProbeRejectsBadOptions) {
  EXPECT_NE(run_cmd(hr::test::headroom_binary() + " probe --fraction 2").code, 0);
  EXPECT_NE(run_cmd(hr::test::headroom_binary() + " probe --block-mib 0").code, 0);
}

// The tiny UNet's 12.3 MiB of f32 weights cannot stay resident within 12 MiB: the resident mode
// runs out of memory in the sampler, and streaming (stream, auto) makes the workflow fit.
TEST_F(DiagnoseCli, BenchThreeModesUnderATightBudget) {
  const fs::path svg = root_ / "bench.svg", err = root_ / "bench.err";
  std::string cmd = "(";  // stdout is the JSON; stderr, the progress, goes to a file
  cmd += bench("--runs 2 --modes resident,stream,auto --vram-budget 12MiB --json --plot " +
               svg.string());
  cmd += " 2>" + err.string() + ")";
  CmdResult j = run_cmd(cmd, true);
  ASSERT_EQ(j.code, 0) << j.output << file_read(err);
  Json b = Json::parse(j.output);
  EXPECT_EQ(b["baseline"], "resident");
  EXPECT_EQ(b["budget"], 12u << 20);
  ASSERT_EQ(b["modes"].size(), 3u);
  const Json& resident = b["modes"][0];
  EXPECT_TRUE(resident["out_of_memory"].get<bool>()) << resident.dump();
  EXPECT_EQ(resident["oom_node"], "3 KSampler");
  EXPECT_EQ(resident["images"], 0);
  EXPECT_EQ(resident["verdict"]["kind"], "baseline");
  for (int i : {1, 2}) {
    const Json& m = b["modes"][i];
    EXPECT_EQ(m["images"], 2) << m.dump();
    EXPECT_GT(m["median_seconds"].get<double>(), 0);
    EXPECT_GT(m["allocator_level_peak"].get<uint64_t>(), 0u);
    EXPECT_LE(m["allocator_level_peak"].get<uint64_t>(), 12u << 20);
    EXPECT_GT(m["moved_bytes"].get<uint64_t>(), 0u) << m.dump();
    EXPECT_EQ(m["verdict"]["kind"], "fits_only_streaming") << m.dump();
  }
  // Progress goes to stderr, as plain lines when it is not a terminal.
  const std::string progress = file_read(err);
  for (const char* line : {"bench: mode resident", "bench: resident image 1/2 failed",
                           "bench: stream image 2/2", "bench: auto image 2/2"})
    EXPECT_NE(progress.find(line), std::string::npos) << "expected '" << line << "' in:\n"
                                                      << progress;
  EXPECT_EQ(progress.find('\r'), std::string::npos);
  const std::string chart = file_read(svg);
  EXPECT_TRUE(looks_like_svg(chart));
  EXPECT_NE(chart.find("allocator level"), std::string::npos);
  EXPECT_NE(chart.find("out of memory in 3 KSampler"), std::string::npos);
  EXPECT_GE(std::count_if(chart.begin(), chart.end(), [](char c) { return c == '\n'; }), 20);
}

// With room for the resident weights, streaming lowers the allocator-level peak; the table and
// the verdict say by how much and at what cost.
TEST_F(DiagnoseCli, BenchTableAndVerdictWhereBothModesRun) {
  CmdResult t = run_cmd(bench("--runs 1 --modes resident,stream --vram-budget 64MiB"), true);
  ASSERT_EQ(t.code, 0) << t.output;
  for (const char* s : {"| resident | 1 |", "| stream | 1 |", "allocator-level peak",
                        "driver-level peak (this process)", "verdict:", "resident: baseline: peak"})
    EXPECT_NE(t.output.find(s), std::string::npos) << "expected '" << s << "' in:\n" << t.output;
  const bool judged =
      t.output.find("stream: saves ") != std::string::npos ||
      t.output.find("stream: streaming fails for this workflow") != std::string::npos;
  EXPECT_TRUE(judged) << t.output;
}

TEST_F(DiagnoseCli, BenchRejectsUnknownModes) {
  EXPECT_EQ(run_cmd(bench("--modes resident,swap")).code, 2);
  EXPECT_EQ(run_cmd(bench("--modes auto,auto")).code, 2);
}

TEST_F(DiagnoseCli, PlanExplainNamesTheDominantSegmentPerNode) {
  CmdResult t = run_cmd(plan(""), true);
  ASSERT_EQ(t.code, 0) << t.output;
  for (const char* s : {"context and overhead", "| 3 | KSampler |",
                        "node 3 KSampler: ", "node 8 VAEDecode: ", "allocator level"})
    EXPECT_NE(t.output.find(s), std::string::npos) << "expected '" << s << "' in:\n" << t.output;
  CmdResult j = run_cmd(plan("--json"), true);
  ASSERT_EQ(j.code, 0) << j.output;
  Json p = Json::parse(j.output);
  ASSERT_EQ(p["explain"].size(), p["nodes"].size());
  for (const Json& n : p["explain"]) {
    const std::string d = n["dominant"];
    const std::string cls = n["class_type"];
    if (cls == "KSampler" || cls == "VAEDecode" || cls == "CLIPTextEncode") {
      EXPECT_TRUE(d == "weights" || d == "activations" || d == "context and overhead") << n.dump();
      EXPECT_FALSE(n["remedy"].get<std::string>().empty());
    } else {
      EXPECT_EQ(d, "none") << n.dump();  // runs no model
    }
    EXPECT_EQ(n["overhead"].get<uint64_t>() + n["weights"].get<uint64_t>() +
                  n["activations"].get<uint64_t>(),
              n["peak"].get<uint64_t>())
        << n.dump();
  }
}

}  // namespace
