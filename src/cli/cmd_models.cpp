// `headroom models`: list checkpoints in the models folder and inspect them (architecture,
// dtypes, parameter counts and bytes per component).
#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "models/checkpoint.h"
#include "models/model_paths.h"
#include "models/weight_format.h"

namespace hr {
namespace {

struct ComponentStats {
  uint64_t params = 0, bytes = 0;
  std::map<std::string, uint64_t> dtypes;  // dtype -> tensor count
};

// What the weights cannot show and where each value came from (Note [model settings order]):
// the config file, the metadata, or detection.
void print_settings(const SafetensorsFile& f, const CheckpointInfo& info) {
  const ModelSettings& s = info.settings;
  std::printf("  settings (config file: %s)\n",
              s.config_path.empty() ? "none beside the checkpoint" : s.config_path.c_str());
  if (info.has_diffusion)
    std::printf("    %-20s %s (%s)\n", "prediction", prediction_name(info.prediction),
                info.prediction_source.c_str());
  if (info.family->settings_describe)
    for (const auto& [label, text] : info.family->settings_describe(f, info))
      std::printf("    %-20s %s\n", label.c_str(), text.c_str());
}

// How the component's weights are stored when not plainly (Note [fp8 weights] in graph.h).
void print_storage(const SafetensorsFile& f, const std::string& prefix) {
  Result<WeightFormats> w = weight_formats_read(f, prefix);
  if (!w.ok()) {
    std::printf("  %-26s refused: %s\n", "", w.status().message().c_str());
    return;
  }
  if (!w->any()) return;
  uint64_t bytes = 0;
  for (const auto& [name, st] : *w->storage)
    if (const SafetensorsEntry* e = f.find(prefix + name)) bytes += e->end - e->begin;
  std::printf("  %-26s storage %s: %zu fp8 weights (%.1f MiB) kept fp8 on the host, the device "
              "and over PCIe, %zu with a scale; dequantized to the compute dtype before use\n",
              "", w->kind.c_str(), w->storage->size(), double(bytes) / double(1 << 20),
              w->scales.size());
}

void inspect(const std::string& path) {
  Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(path);
  if (!f.ok()) {
    std::printf("%s\n  error: %s\n", path.c_str(), f.status().message().c_str());
    return;
  }
  Result<CheckpointInfo> info = checkpoint_inspect(**f);
  std::printf("%s\n", path.c_str());
  if (!info.ok()) {
    std::printf("  not a supported model: %s\n", info.status().message().c_str());
    return;
  }
  std::printf("  %s\n", info->str().c_str());
  std::map<std::string, std::string> prefixes;
  if (info->has_diffusion) prefixes[info->family->diffusion_name] = info->diffusion_prefix;
  if (info->has_vae) prefixes["vae"] = info->vae_prefix;
  for (size_t i = 0; i < info->text_encoders.size(); ++i)
    prefixes[std::string("text_encoder.") + info->text_encoders[i].kind] =
        info->text_encoders[i].prefix;
  for (const auto& [name, prefix] : prefixes) {
    ComponentStats st;
    for (const SafetensorsEntry& e : (*f)->entries()) {
      if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
      // A bare file (empty prefix) holds one component; count every tensor.
      st.params += uint64_t(e.shape.numel());
      st.bytes += e.end - e.begin;
      st.dtypes[dtype_name(e.dtype)]++;
    }
    std::string dts;
    for (const auto& [d, n] : st.dtypes) dts += fmt::format("{}{} x{}", dts.empty() ? "" : ", ", d, n);
    std::printf("  %-26s %14s params %10.1f MiB  [%s]\n", name.c_str(),
                fmt::format("{:L}", st.params).c_str(), double(st.bytes) / double(1 << 20),
                dts.c_str());
    print_storage(**f, prefix);
  }
  print_settings(**f, *info);
  for (const auto& [k, v] : (*f)->metadata())
    if (k.rfind("headroom.", 0) == 0) std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
}

}  // namespace

int cmd_models(const ModelsArgs& args) {
  if (!args.files.empty()) {
    for (const std::string& f : args.files) inspect(f);
    return 0;
  }
  Result<ModelPaths> paths = ModelPaths::from_config(args.models_dir, args.extra_model_paths);
  if (!paths.ok()) {
    std::fprintf(stderr, "headroom: %s\n", paths.status().message().c_str());
    return kExitInvalid;
  }
  bool any = false;
  // The loaders' folders, by ComfyUI's names (Note [model folder aliases]).
  for (const char* folder : {"checkpoints", "diffusion_models", "vae", "text_encoders"}) {
    for (const std::string& name : paths->files(folder)) {
      Result<std::string> path = paths->file_path(folder, name);
      if (path.ok()) inspect(*path);
      any = true;
    }
  }
  if (!any)
    std::printf("no models under %s%s (expected ComfyUI's layout: %s/checkpoints/*.safetensors)\n",
                args.models_dir.c_str(),
                args.extra_model_paths.empty() ? "" : " or the extra model paths",
                args.models_dir.c_str());
  return 0;
}

}  // namespace hr
