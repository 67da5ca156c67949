// `headroom make-model`: write a random-weight checkpoint in the real key layout (SD archs), or a
// models folder of random Flux.1 (--arch flux) or Z-Image (--arch zimage) files.
#include <cstdio>

#include "cli/commands.h"
#include "core/bytes.h"
#include "models/flux/flux_make_model.h"
#include "models/make_model.h"
#include "models/zimage/zimage_make_model.h"

namespace hr {

namespace {

// Flux: the DiT, both text encoders, the VAE and the single-file checkpoint under out_dir, in
// their published dtypes (--dtype applies to the SD archs only); --no-checkpoint leaves the
// checkpoint out (at full size it doubles the disk the folder takes: 68 GB instead of 34).
int make_flux(const MakeModelSpec& spec, const MakeModelArgs& args) {
  if (args.out_dir.empty() || !args.output.empty()) {
    std::fprintf(stderr,
                 "headroom make-model: --arch flux writes a folder: give --out-dir DIR "
                 "(and no --output)\n");
    return 2;
  }
  Result<std::vector<FluxMadeFile>> made = flux_make_model_write(spec, args.out_dir, !args.no_checkpoint);
  if (!made.ok()) {
    std::fprintf(stderr, "headroom make-model: %s\n", made.status().str().c_str());
    return 1;
  }
  for (const FluxMadeFile& f : *made)
    std::printf("wrote %s: %llu parameters, %s\n", f.path.c_str(),
                static_cast<unsigned long long>(f.params), bytes_format(f.bytes).c_str());
  std::printf("flux %s, seed %llu\n", args.size.c_str(),
              static_cast<unsigned long long>(args.seed));
  return 0;
}

// Z-Image: the DiT, Qwen3-4B and the VAE under out_dir, in their published dtypes.
int make_zimage(const MakeModelSpec& spec, const MakeModelArgs& args) {
  if (args.out_dir.empty() || !args.output.empty()) {
    std::fprintf(stderr,
                 "headroom make-model: --arch zimage writes a folder: give --out-dir DIR "
                 "(and no --output)\n");
    return 2;
  }
  Result<std::vector<MadeFile>> made = zimage_make_model_write(spec, args.out_dir);
  if (!made.ok()) {
    std::fprintf(stderr, "headroom make-model: %s\n", made.status().str().c_str());
    return 1;
  }
  for (const MadeFile& f : *made)
    std::printf("wrote %s: %llu parameters, %s\n", f.path.c_str(),
                static_cast<unsigned long long>(f.params), bytes_format(f.bytes).c_str());
  std::printf("zimage %s, seed %llu\n", args.size.c_str(),
              static_cast<unsigned long long>(args.seed));
  return 0;
}

}  // namespace

int cmd_make_model(const MakeModelArgs& args) {
  MakeModelSpec spec;
  spec.arch = args.arch;
  spec.size = args.size == "full" ? ModelSize::FULL : ModelSize::TINY;
  spec.seed = args.seed;
  spec.dtype = *dtype_from_name(args.dtype);
  if (args.arch == "flux") return make_flux(spec, args);
  if (args.arch == "zimage") return make_zimage(spec, args);
  if (args.output.empty()) {
    std::fprintf(stderr, "headroom make-model: --output FILE is required for --arch %s\n",
                 args.arch.c_str());
    return 2;
  }
  Result<uint64_t> n = make_model_write(spec, args.output);
  if (!n.ok()) {
    std::fprintf(stderr, "headroom make-model: %s\n", n.status().str().c_str());
    return 1;
  }
  std::printf("wrote %s: %s %s, %llu parameters, %s, seed %llu, byte tokenizer\n",
              args.output.c_str(), args.arch.c_str(), args.size.c_str(),
              static_cast<unsigned long long>(*n), args.dtype.c_str(),
              static_cast<unsigned long long>(args.seed));
  return 0;
}

}  // namespace hr
