// `headroom make-model`: write a random-weight checkpoint in the real key layout.
#include <cstdio>

#include "cli/commands.h"
#include "models/make_model.h"

namespace hr {

int cmd_make_model(const MakeModelArgs& args) {
  MakeModelSpec spec;
  spec.arch = args.arch;
  spec.size = args.size == "full" ? ModelSize::FULL : ModelSize::TINY;
  spec.seed = args.seed;
  spec.dtype = *dtype_from_name(args.dtype);
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
