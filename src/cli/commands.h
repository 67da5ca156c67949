// The headroom subcommands; each returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/budget.h"

namespace CLI {
class App;
}

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
  std::string arch = "sd1";  // sd1, sd2, sdxl, sdxl-refiner, flux
  std::string size = "tiny";  // tiny, full
  uint64_t seed = 0;
  std::string output;   // the checkpoint (SD archs)
  std::string out_dir;  // the models folder (flux: several files)
  std::string dtype = "f16";
  bool no_checkpoint = false;  // flux: skip the single-file checkpoint
};
int cmd_make_model(const MakeModelArgs& args);

struct ProbeArgs {
  int device = 0;
  int block_mib = 512;
  double fraction = 0.5;  // of the blocks moved to page-locked host memory and back
  int bandwidth_mib = 256;
  std::string pinned_budget;  // as --pinned-budget; "" = half of RAM
  bool json = false;
  std::string plot;  // SVG file
};
int cmd_probe(const ProbeArgs& args);

// `headroom bench`: the workflow run `runs` times in each memory mode (Note [bench modes]).
struct BenchArgs {
  RunArgs run;  // workflow, folders, device, dtype, --vram-budget (the mode flags are not taken)
  int runs = 3;
  std::string modes = "resident,stream,auto";
  bool json = false;
  std::string plot;  // SVG file
};
int cmd_bench(const BenchArgs& args);

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
  std::string device = "auto";  // as run: auto, cpu, cuda (whose op workspaces to plan for)
  int threads = 0;
  // The folders a run reads, as run takes them (LoadImage's image gives its node's shapes).
  std::string input_dir = "input";
  std::string output_dir = "output";
  std::string temp_dir = "temp";
  std::string clip_tokenizer;
  bool verbose = false;
  bool explain = false;  // per node: the three segments, the dominant one and its remedy
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
  std::string queue;  // redis://HOST:PORT/DB: jobs run in `headroom worker` processes
  std::string web_root;  // the dashboard's built files; empty: found (server/web_root.h)
  std::string preview_method = "none";
  int threads = 0;
  double max_upload_mb = 64;
  double vram_warning_pct = 80, vram_danger_pct = 90;  // of the budget (Note [warning level])
  MemoryArgs memory;
  std::vector<std::string> argv;  // for /system_stats
};
int cmd_serve(const ServeArgs& args);

// `headroom worker --queue redis://... --device cpu|cuda:N` (src/cli/cmd_worker.cpp).
struct WorkerArgs {
  std::string queue;
  std::string name;
  std::string models_dir = "models";
  std::vector<std::string> extra_model_paths;
  std::string output_dir = "output";
  std::string input_dir = "input";
  std::string temp_dir = "temp";
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string clip_tokenizer;
  std::string preview_method = "none";
  int threads = 0;
  double lease_s = 10;
  int max_deliveries = 3;
  double vram_warning_pct = 80, vram_danger_pct = 90;
  MemoryArgs memory;
};
int cmd_worker(const WorkerArgs& args);
// Adds the `worker` subcommand with its options to `app`.
CLI::App* worker_command_add(CLI::App& app, WorkerArgs& args);

}  // namespace hr
