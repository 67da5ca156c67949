// `headroom plan WORKFLOW.json`: exit 0 when the workflow fits, 1 when it cannot (with the
// smallest budget that would), 2 for an invalid workflow; --json carries the plan's fields.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "run_cmd.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using hr::test::CmdResult;
using hr::test::run_cmd;

TEST(PlanCli, ExitCodesAndJson) {
  const fs::path root = fs::temp_directory_path() / ("headroom_plan_cli_" + std::to_string(getpid()));
  fs::create_directories(root / "models/checkpoints");
  const std::string bin = hr::test::headroom_binary();
  ASSERT_EQ(run_cmd(bin + " make-model --arch sd1 --size tiny --dtype f32 -o " +
                    (root / "models/checkpoints/headroom-tiny-sd1.safetensors").string(), true)
                .code,
            0);
  const std::string base = bin + " plan " + hr::test::source_dir() +
                           "/examples/default_workflow.json --models-dir " +
                           (root / "models").string();
  CmdResult fits = run_cmd(base + " --json", true);
  ASSERT_EQ(fits.code, 0) << fits.output;
  Json j = Json::parse(fits.output);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["peak"].get<uint64_t>(), 0u);
  EXPECT_GT(j["smallest_budget"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["nodes"].size(), 7u);
  for (const Json& n : j["nodes"])
    for (const char* k : {"node_id", "class_type", "weight_bytes", "resident_bytes",
                          "streamed_bytes", "arena_bytes", "workspace_bytes", "decision",
                          "total_after", "peak"})
      EXPECT_TRUE(n.contains(k)) << k;

  CmdResult tight = run_cmd(base + " --json --vram-budget 1MiB", true);
  ASSERT_EQ(tight.code, 1) << tight.output;
  Json t = Json::parse(tight.output);
  EXPECT_FALSE(t["fits"].get<bool>());
  EXPECT_EQ(t["smallest_budget"], j["smallest_budget"]);

  CmdResult table = run_cmd(base, true);
  EXPECT_EQ(table.code, 0);
  EXPECT_NE(table.output.find("smallest budget that fits"), std::string::npos) << table.output;

  std::ofstream(root / "bad.json") << "{\"1\": {\"class_type\": \"NoSuchNode\", \"inputs\": {}}}";
  EXPECT_EQ(run_cmd(bin + " plan " + (root / "bad.json").string(), true).code, 2);
  fs::remove_all(root);
}

}  // namespace
