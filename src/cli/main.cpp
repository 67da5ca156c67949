// headroom command line: subcommands run, models, make-model, plan, probe.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "backend/backend.h"

namespace {

int cmd_probe() {
  auto cpu = hr::cpu_backend_create();
  hr::DeviceInfo ci = cpu->info();
  std::printf("device cpu: %s, %.1f GiB RAM (%.1f GiB free)\n", ci.name.c_str(),
              double(ci.memory_total) / double(1ull << 30), double(ci.memory_free) / double(1ull << 30));
  auto cuda = hr::cuda_backend_create(0);
  if (cuda.ok()) {
    hr::DeviceInfo gi = (*cuda)->info();
    std::printf("device cuda:%d: %s, %.1f GiB VRAM (%.1f GiB free, driver level)\n", gi.index,
                gi.name.c_str(), double(gi.memory_total) / double(1ull << 30),
                double(gi.memory_free) / double(1ull << 30));
  } else {
    std::printf("device cuda: none (%s)\n", cuda.status().message().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"headroom: Stable Diffusion workflows that never die of out-of-memory"};
  app.set_version_flag("--version", std::string("headroom ") + HEADROOM_VERSION);
  app.require_subcommand(0, 1);
  CLI::App* probe = app.add_subcommand("probe", "list the devices headroom can use");
  CLI11_PARSE(app, argc, argv);
  if (probe->parsed() || argc == 1) return cmd_probe();
  return 0;
}
