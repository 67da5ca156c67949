// The Z-Image benchmark workloads (issue 40 item 5): the Z-Image Turbo DiT step at 1024x1024 b1
// and the Qwen3-4B encode of 128 tokens, at full size (random weights of the real shapes) or tiny
// (--size tiny: make-model's tiny Z-Image through the same code on the CPU, Note [tiny z-image
// bench]).
#pragma once

#include <optional>
#include <string>

#include "bench_common.h"
#include "bench_flux.h"
#include "models/llm/llm_encoder.h"
#include "models/zimage/zimage_dit.h"
#include "models/zimage/zimage_make_model.h"

namespace hr::bench {

// Note [z-image bench caption]
// The DiT step reads the caption length of examples/zimage_turbo_workflow.json: its prompt in
// Z-Image's chat template is kZImageTemplateTokens Qwen tokens (zimage_prompt_ids: <|im_start|>,
// "user", "\n", one token for each of the prompt's 13 words and 2 commas, <|im_end|>, "\n",
// <|im_start|>, "assistant", "\n"; every piece is one entry of data/qwen_tokenizer/vocab.json).
// The DiT pads them to 32 with cap_pad_token, so any length from 1 to 32 costs the same: a joint
// sequence of 32 + 4096 tokens. bench/torch_peer_zimage.py gives diffusers the same length
// (CAP_TOKENS).
constexpr int64_t kZImageTemplateTokens = 23;

// Note [tiny z-image bench]
// --size tiny runs the Z-Image workloads through the same functions at make-model's tiny sizes
// (Note [tiny z-image] in models/zimage/zimage_make_model.cpp: a 2-head DiT of Z-Image's head
// width with one layer and one refiner of each kind, a 2-layer Qwen3 of width 32 with the full
// vocabulary) on a 4x4 grid of patches (a 64x64 image) and a 16-token encode, so the CPU
// exercises the rows and tables the GPU run prints at full size.
struct ZImageBenchSize {
  bool tiny = false;
  ZImageMakeConfig models;
  int64_t grid = 64;  // patches per side: 1024 px / 16
  int64_t cap_tokens = kZImageTemplateTokens;
  int64_t llm_tokens = 128;  // the Qwen3 encode row (the peer's shape)
  int64_t px = 1024;
  std::string tag() const { return tiny ? " (tiny)" : ""; }
};

inline ZImageBenchSize zimage_bench_size(const std::string& size) {
  ZImageBenchSize s;
  s.tiny = size == "tiny";
  s.models = zimage_make_config(s.tiny ? ModelSize::TINY : ModelSize::FULL);
  if (s.tiny) {
    s.grid = 4;
    s.llm_tokens = 16;
    s.px = 64;
  }
  return s;
}

// The Z-Image Turbo DiT step at size.px (1024: a 64x64 grid of 2x2 patches, 4096 image tokens,
// beside the template's caption), batch 1 (cfg 1: one call, as ComfyUI runs the template), sigma
// 0.5, random weights made once; the shapes bench/torch_peer_zimage.py gives diffusers.
inline Result<Workload> workload_zimage(const ZImageBenchSize& size, DType dt) {
  Workload w;
  const ZImageConfig& cfg = size.models.dit;
  w.name = fmt::format("Z-Image DiT step {}x{} b1, {} caption tokens{}", size.px, size.px,
                       size.cap_tokens, size.tag());
  w.key = "zimage_dit";
  const int64_t n = size.grid;
  HR_ASSIGN_OR_RETURN(w.graph, zimage_dit_graph(cfg, 1, n, n, size.cap_tokens, dt));
  HR_ASSIGN_OR_RETURN(HostTensor pe, zimage_pe_table(size.cap_tokens, n, n, cfg.pad_multiple,
                                                     cfg.axes_dim, cfg.rope_theta));
  HostTensor sigma(DType::F32, Shape{1});
  sigma.f32()[0] = 0.5f;
  w.inputs.emplace_back("img", filled(dt, Shape{1, n * n, cfg.patch_width()}, 1.0f));
  w.inputs.emplace_back("context", filled(dt, Shape{1, size.cap_tokens, cfg.cap_feat_dim}, 0.5f));
  w.inputs.emplace_back("sigma", std::move(sigma));
  w.inputs.emplace_back("pe", std::move(pe));
  w.weights = std::make_shared<WeightSet>();
  random_weights_parallel(w.graph, 11, *w.weights);
  return w;
}

// Qwen3-4B (Z-Image's text encoder: 36 layers of width 2560, 32 query and 8 KV heads of 128)
// encoding one row of size.llm_tokens (128) ids to hidden_states[-2] (35 layers, no final norm:
// Note [LLM hidden state] in models/llm/llm_config.h), computed in `dt` with its weights in `dt`.
// `stored` (BF16): the weights kept in bf16 and cast at use into an f32 computation, as ComfyUI
// and headroom's text encoder run it (Note [LLM encoder precision] in models/llm/llm_encoder.cpp).
inline Result<Workload> workload_qwen3(const ZImageBenchSize& size, DType dt,
                                       std::optional<DType> stored = std::nullopt) {
  Workload w;
  LLMConfig cfg = size.models.llm;
  w.key = stored ? "qwen3_4b_encode_f32_cast" : "qwen3_4b_encode";
  w.name = fmt::format("Qwen3-4B encode {} tokens b1{}{}", size.llm_tokens,
                       stored ? fmt::format(", {} weights", dtype_name(*stored)) : std::string(),
                       size.tag());
  HR_ASSIGN_OR_RETURN(Graph probe,
                      llm_encoder_graph(cfg, 1, size.llm_tokens, stored ? *stored : dt));
  w.weights = std::make_shared<WeightSet>();
  random_weights_parallel(probe, 13, *w.weights);
  if (stored) {
    auto map = std::make_shared<WeightStorageMap>();
    for (const std::string& n : w.weights->names())
      if (dtype_is_float(w.weights->find(n)->dtype())) (*map)[n] = WeightStorage{*stored, ""};
    cfg.storage = map;
    w.weights->set_storage(map);
  }
  HR_ASSIGN_OR_RETURN(w.graph, llm_encoder_graph(cfg, 1, size.llm_tokens, dt));
  HostTensor ids(DType::I64, Shape{1, size.llm_tokens});
  for (int64_t i = 0; i < size.llm_tokens; ++i)
    static_cast<int64_t*>(ids.data())[i] = (i * 7919 + 3) % cfg.vocab;
  HR_ASSIGN_OR_RETURN(HostTensor rope, llm_rope_table(cfg, size.llm_tokens));
  w.inputs.emplace_back("ids", std::move(ids));
  w.inputs.emplace_back("rope", std::move(rope));
  return w;
}

}  // namespace hr::bench
