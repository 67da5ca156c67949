// The headroom subcommands; each returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/budget.h"

namespace hr {

struct RunArgs {
  std::string workflow = "-";  // file or "-" for stdin
  std::string models_dir = "models";
  std::vector<std::string> extra_model_paths;  // extra_model_paths.yaml files, in order
  std::string output_dir = "output";
  std::string input_dir = "input";
  std::string temp_dir = "temp";
  std::string device = "auto";  // auto, cpu, cuda
  std::string dtype = "auto";   // auto (f16 on cuda, f32 on cpu), f32, f16, bf16
  std::string clip_tokenizer;   // folder with vocab.json + merges.txt
  int threads = 0;
  bool quiet = false;
  MemoryArgs memory;  // --vram-budget, --reserve-vram, --lowvram/--novram/--highvram/--gpu-only
};

// Exit codes of `headroom run`.
constexpr int kExitOk = 0;
constexpr int kExitInvalid = 2;  // the workflow failed validation (ComfyUI's error shown)
constexpr int kExitFailed = 3;   // a node failed while running

int cmd_run(const RunArgs& args);
struct ModelsArgs {
  std::string models_dir = "models";
  std::vector<std::string> extra_model_paths;  // extra_model_paths.yaml files, in order
  std::vector<std::string> files;              // inspect these instead of listing the folders
};
int cmd_models(const ModelsArgs& args);

struct MakeModelArgs {
  std::string arch = "sd1";  // sd1, sd2
  std::string size = "tiny";  // tiny, full
  uint64_t seed = 0;
  std::string output;
  std::string dtype = "f16";
};
int cmd_make_model(const MakeModelArgs& args);
int cmd_probe();

struct PlanArgs {
  // A workflow file plans that workflow (exit 0 fits, 1 cannot fit, 2 invalid); empty: the
  // model graphs of --arch.
  std::string workflow;
  std::string models_dir = "models";
  std::vector<std::string> extra_model_paths;
  bool json = false;
  MemoryArgs memory;  // --vram-budget etc., as run
  std::string arch = "sd1";   // sd1, sd2, sdxl
  std::string size = "full";  // full, tiny (sd1/sd2)
  int width = 512, height = 512, batch = 1;
  std::string dtype = "auto";  // workflow: as run (f16 on cuda, f32 on cpu); --arch: f16
  std::string device = "cpu";  // whose op workspaces to plan for
  bool verbose = false;
};
int cmd_plan(const PlanArgs& args);

struct ServeArgs {
  std::string listen = "127.0.0.1";
  int port = 8188;
  std::string models_dir = "models";
  std::vector<std::string> extra_model_paths;
  std::string output_dir = "output";
  std::string input_dir = "input";
  std::string temp_dir = "temp";
  std::string device = "auto";
  std::string dtype = "auto";
  std::string clip_tokenizer;
  std::string database = "headroom-jobs.sqlite";  // ":memory:" keeps nothing across restarts
  int threads = 0;
  double max_upload_mb = 64;
  double vram_warning_pct = 80, vram_danger_pct = 90;  // of the budget (Note [warning level])
  MemoryArgs memory;
  std::vector<std::string> argv;  // for /system_stats
};
int cmd_serve(const ServeArgs& args);

}  // namespace hr
