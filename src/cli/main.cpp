// headroom command line: run, serve, plan, models, make-model, probe, bench.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/crash_report.h"

// Both `run` and `models` read ComfyUI's extra_model_paths.yaml; the option repeats.
constexpr const char* kExtraPathsHelp =
    "extra_model_paths.yaml (ComfyUI's format) adding model folders; repeatable";

namespace hr {

// The memory flags `run` (and later `plan`, `serve`, `bench`) share (Note [budget flags]).
void add_memory_options(CLI::App& cmd, MemoryArgs& m) {
  cmd.add_option("--vram-budget", m.vram_budget,
                 "most device memory headroom may hold (allocator level): 6GiB, 6144MiB or 40% "
                 "of the device; default: free memory at start less --reserve-vram");
  cmd.add_option("--reserve-vram", m.reserve_vram,
                 "GiB of device memory left for other programs when the budget is derived "
                 "(ComfyUI's flag; default 0.4 on a GPU)");
  cmd.add_flag("--lowvram", m.lowvram, "weights take at most half the budget; the rest streams");
  cmd.add_flag("--novram", m.novram, "no weight stays resident between uses");
  cmd.add_flag("--highvram", m.highvram, "keep models resident after their prompt");
  cmd.add_flag("--gpu-only", m.gpu_only, "keep every weight resident; never stream");
  cmd.add_flag("--fp8_e4m3fn-unet", m.fp8_e4m3fn_unet,
               "store diffusion models in fp8 (e4m3fn) at load, as ComfyUI's flag");
  cmd.add_flag("--fp8_e5m2-unet", m.fp8_e5m2_unet, "store diffusion models in fp8 (e5m2) at load");
  cmd.add_flag("--fp8_e4m3fn-text-enc", m.fp8_e4m3fn_text_enc,
               "store text encoders in fp8 (e4m3fn) at load");
  cmd.add_flag("--fp8_e5m2-text-enc", m.fp8_e5m2_text_enc,
               "store text encoders in fp8 (e5m2) at load");
  cmd.add_option("--pinned-budget", m.pinned_budget,
                 "most page-locked host memory for streamed weights: 8GiB or 25% of RAM "
                 "(default: half of RAM); beyond it copies come from pageable memory");
}

}  // namespace hr

int main(int argc, char** argv) {
  hr::crash_report_install();
  CLI::App app{"headroom: Stable Diffusion workflows (ComfyUI API format) that never die of "
               "out-of-memory"};
  app.set_version_flag("--version", std::string("headroom ") + HEADROOM_VERSION);
  app.require_subcommand(0, 1);

  hr::RunArgs run;
  CLI::App* run_cmd = app.add_subcommand("run", "run an API-format workflow (file or - for stdin)");
  run_cmd->add_option("workflow", run.workflow, "workflow JSON file, or - for stdin");
  run_cmd->add_option("--models-dir", run.models_dir, "models folder (ComfyUI layout)");
  run_cmd->add_option("--extra-model-paths-config", run.extra_model_paths, kExtraPathsHelp)
      ->allow_extra_args(false);
  run_cmd->add_option("--output-dir", run.output_dir, "where SaveImage writes");
  run_cmd->add_option("--input-dir", run.input_dir, "where LoadImage reads");
  run_cmd->add_option("--temp-dir", run.temp_dir, "where PreviewImage writes");
  run_cmd->add_option("--device", run.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  run_cmd->add_option("--dtype", run.dtype, "compute dtype: auto, f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  run_cmd->add_option("--threads", run.threads, "CPU threads (0: all)");
  run_cmd->add_option("--clip-tokenizer", run.clip_tokenizer,
                      "folder with the CLIP vocab.json and merges.txt");
  run_cmd->add_flag("--quiet", run.quiet, "no progress or memory messages on stderr, only errors");
  hr::add_memory_options(*run_cmd, run.memory);

  hr::ModelsArgs models;
  CLI::App* models_cmd = app.add_subcommand("models", "list and inspect checkpoints");
  models_cmd->add_option("--models-dir", models.models_dir, "models folder (ComfyUI layout)");
  models_cmd->add_option("--extra-model-paths-config", models.extra_model_paths, kExtraPathsHelp)
      ->allow_extra_args(false);
  models_cmd->add_option("files", models.files, "checkpoint files to inspect (default: all found)");

  hr::MakeModelArgs mm;
  CLI::App* mm_cmd = app.add_subcommand("make-model", "write a random-weight checkpoint");
  mm_cmd->add_option("--arch", mm.arch, "sd1, sd2, sdxl, sdxl-refiner, flux or zimage")
      ->check(CLI::IsMember({"sd1", "sd2", "sdxl", "sdxl-refiner", "flux", "zimage"}));
  mm_cmd->add_option("--size", mm.size, "tiny or full")->check(CLI::IsMember({"tiny", "full"}));
  mm_cmd->add_option("--seed", mm.seed, "random seed");
  mm_cmd->add_option("--dtype", mm.dtype, "storage dtype: f16, bf16, f32")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
  mm_cmd->add_option("-o,--output", mm.output, "output .safetensors file (SD archs)");
  mm_cmd->add_option("--out-dir", mm.out_dir,
                     "models folder to write (flux: diffusion_models/, text_encoders/, vae/, "
                     "checkpoints/; zimage: the first three)");
  mm_cmd->add_flag("--no-checkpoint", mm.no_checkpoint,
                   "flux: leave out checkpoints/ (the single-file checkpoint; 34 GB at full size)");

  hr::PlanArgs plan;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "print the memory plan of a workflow (or of a model with --arch) without running it");
  plan_cmd->add_option("workflow", plan.workflow,
                       "API-format workflow JSON (- for stdin); exit 0 fits, 1 cannot fit, 2 invalid");
  plan_cmd->add_option("--models-dir", plan.models_dir, "models folder (ComfyUI layout)");
  plan_cmd->add_option("--extra-model-paths-config", plan.extra_model_paths, kExtraPathsHelp)
      ->allow_extra_args(false);
  plan_cmd->add_flag("--json", plan.json, "machine-readable output (workflow plans)");
  hr::add_memory_options(*plan_cmd, plan.memory);
  plan_cmd->add_option("--arch", plan.arch, "sd1, sd2 or sdxl")->check(CLI::IsMember({"sd1", "sd2", "sdxl"}));
  plan_cmd->add_option("--size", plan.size, "full or tiny")->check(CLI::IsMember({"full", "tiny"}));
  plan_cmd->add_option("--width", plan.width, "image width (pixels)");
  plan_cmd->add_option("--height", plan.height, "image height (pixels)");
  plan_cmd->add_option("--batch", plan.batch, "images per batch (the UNet runs 2x for cfg)");
  plan_cmd->add_option("--dtype", plan.dtype, "auto (workflow: as run; --arch: f16), f16, bf16 or f32")
      ->check(CLI::IsMember({"auto", "f16", "bf16", "f32"}));
  plan_cmd->add_option("--device", plan.device, "auto, cpu or cuda, as run (op workspaces)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  plan_cmd->add_option("--threads", plan.threads, "CPU threads (0: all)");
  plan_cmd->add_option("--input-dir", plan.input_dir, "where LoadImage reads (as run)");
  plan_cmd->add_option("--output-dir", plan.output_dir, "where SaveImage would write (nothing is written)");
  plan_cmd->add_option("--temp-dir", plan.temp_dir, "where PreviewImage would write (nothing is written)");
  plan_cmd->add_option("--clip-tokenizer", plan.clip_tokenizer,
                       "folder with the CLIP vocab.json and merges.txt");
  plan_cmd->add_flag("--verbose", plan.verbose, "print every node");
  plan_cmd->add_flag("--explain", plan.explain,
                     "per node: context and overhead, resident weights and activations, the one "
                     "that dominates the peak and the remedy that lowers it (workflow plans)");

  hr::ServeArgs serve;
  serve.argv.assign(argv, argv + argc);
  CLI::App* serve_cmd = app.add_subcommand("serve", "run a ComfyUI-compatible server (HTTP + WebSocket)");
  serve_cmd->add_option("--listen", serve.listen, "address to listen on (default 127.0.0.1: this machine only)");
  serve_cmd->add_option("--port", serve.port, "TCP port (0: any free port)")->check(CLI::Range(0, 65535));
  serve_cmd->add_option("--models-dir", serve.models_dir, "models folder (ComfyUI layout)");
  serve_cmd->add_option("--extra-model-paths-config", serve.extra_model_paths, kExtraPathsHelp)
      ->allow_extra_args(false);
  serve_cmd->add_option("--output-dir", serve.output_dir, "where SaveImage writes and /view reads");
  serve_cmd->add_option("--input-dir", serve.input_dir, "where /upload/image writes and LoadImage reads");
  serve_cmd->add_option("--temp-dir", serve.temp_dir, "where PreviewImage writes");
  serve_cmd->add_option("--device", serve.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  serve_cmd->add_option("--dtype", serve.dtype, "compute dtype: auto, f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  serve_cmd->add_option("--threads", serve.threads, "CPU threads (0: all)");
  serve_cmd->add_option("--clip-tokenizer", serve.clip_tokenizer,
                        "folder with the CLIP vocab.json and merges.txt");
  serve_cmd
      ->add_option("--preview-method", serve.preview_method,
                   "sampler previews sent to the WebSocket client: none, auto or latent2rgb "
                   "(ComfyUI's flag; default none)")
      ->check(CLI::IsMember({"none", "auto", "latent2rgb"}));
  serve_cmd->add_option("--database", serve.database,
                        "SQLite file keeping the queue and history across restarts (:memory: for none)");
  serve_cmd->add_option("--queue", serve.queue,
                        "redis://HOST:PORT/DB: queue jobs in Redis Streams for `headroom worker` "
                        "processes instead of running them here (docs/DISTRIBUTED.md)");
  serve_cmd->add_option("--web-root", serve.web_root,
                        "the dashboard's built files (web/dist; default: found next to the "
                        "executable or in the source tree)");
  serve_cmd->add_option("--max-upload-size", serve.max_upload_mb, "largest upload in MB (ComfyUI's flag)");
  serve_cmd->add_option("--vram-warning", serve.vram_warning_pct,
                        "percent of the budget above which a job's plan degrades (tiles, streams) "
                        "pre-emptively (default 80)")
      ->check(CLI::Range(1.0, 100.0));
  serve_cmd->add_option("--vram-danger", serve.vram_danger_pct,
                        "percent of the budget above which new jobs wait in the queue (default 90)")
      ->check(CLI::Range(1.0, 100.0));
  hr::add_memory_options(*serve_cmd, serve.memory);

  hr::WorkerArgs worker;
  CLI::App* worker_cmd = hr::worker_command_add(app, worker);

  hr::ProbeArgs probe;
  CLI::App* probe_cmd = app.add_subcommand(
      "probe", "measure the GPU: fill it until allocation fails, move a fraction to host memory "
               "and back, copy bandwidths (host memory bandwidth without a GPU)");
  probe_cmd->add_option("--device", probe.device, "CUDA device index")->check(CLI::NonNegativeNumber);
  probe_cmd->add_option("--block-mib", probe.block_mib, "size of each block the fill allocates (MiB)")
      ->check(CLI::PositiveNumber);
  probe_cmd->add_option("--fraction", probe.fraction, "fraction of the blocks moved to pinned host memory and back")
      ->check(CLI::Range(0.0, 1.0));
  probe_cmd->add_option("--bandwidth-mib", probe.bandwidth_mib, "buffer of each bandwidth measurement (MiB)")
      ->check(CLI::PositiveNumber);
  probe_cmd->add_option("--pinned-budget", probe.pinned_budget,
                        "most page-locked host memory the move may take: 8GiB or 25% of RAM (default: half of RAM)");
  probe_cmd->add_flag("--json", probe.json, "machine-readable output");
  probe_cmd->add_option("--plot", probe.plot, "write a chart (SVG) of memory over time and the bandwidths");

  hr::BenchArgs bench;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "run a workflow N times per memory mode (resident, stream, auto) and judge each mode");
  bench_cmd->add_option("workflow", bench.run.workflow, "workflow JSON file, or - for stdin")->required();
  bench_cmd->add_option("--runs", bench.runs, "images per mode")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--modes", bench.modes, "comma-separated: resident, stream, auto");
  bench_cmd->add_flag("--json", bench.json, "machine-readable output");
  bench_cmd->add_option("--plot", bench.plot, "write a chart (SVG) of memory over time and time per image");
  bench_cmd->add_option("--models-dir", bench.run.models_dir, "models folder (ComfyUI layout)");
  bench_cmd->add_option("--extra-model-paths-config", bench.run.extra_model_paths, kExtraPathsHelp)
      ->allow_extra_args(false);
  bench_cmd->add_option("--output-dir", bench.run.output_dir, "where SaveImage writes");
  bench_cmd->add_option("--input-dir", bench.run.input_dir, "where LoadImage reads");
  bench_cmd->add_option("--temp-dir", bench.run.temp_dir, "where PreviewImage writes");
  bench_cmd->add_option("--device", bench.run.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  bench_cmd->add_option("--dtype", bench.run.dtype, "compute dtype: auto, f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  bench_cmd->add_option("--threads", bench.run.threads, "CPU threads (0: all)");
  bench_cmd->add_option("--clip-tokenizer", bench.run.clip_tokenizer,
                        "folder with the CLIP vocab.json and merges.txt");
  // The modes set the residency flags; only the budget flags are the user's.
  bench_cmd->add_option("--vram-budget", bench.run.memory.vram_budget,
                        "most device memory headroom may hold (allocator level), the same in every mode");
  bench_cmd->add_option("--reserve-vram", bench.run.memory.reserve_vram,
                        "GiB left for other programs when the budget is derived");
  bench_cmd->add_option("--pinned-budget", bench.run.memory.pinned_budget,
                        "most page-locked host memory for streamed weights");

  CLI11_PARSE(app, argc, argv);
  if (run_cmd->parsed()) return hr::cmd_run(run);
  if (models_cmd->parsed()) return hr::cmd_models(models);
  if (mm_cmd->parsed()) return hr::cmd_make_model(mm);
  if (probe_cmd->parsed()) return hr::cmd_probe(probe);
  if (bench_cmd->parsed()) return hr::cmd_bench(bench);
  if (plan_cmd->parsed()) return hr::cmd_plan(plan);
  if (serve_cmd->parsed()) return hr::cmd_serve(serve);
  if (worker_cmd->parsed()) return hr::cmd_worker(worker);
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
