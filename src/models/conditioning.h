// CONDITIONING as the models see it: per entry a cross-attention context and a family's extras
// (ComfyUI keeps them in a dict: "pooled_output", SDXL's size values, later "guidance",
// "attention_mask"), and the batching of several entries into one model call.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace hr {

// ComfyUI's extras keys (comfy/model_base.py encode_adm and friends).
inline constexpr const char* kCondPooledOutput = "pooled_output";
inline constexpr const char* kCondWidth = "width";
inline constexpr const char* kCondHeight = "height";
inline constexpr const char* kCondCropW = "crop_w";
inline constexpr const char* kCondCropH = "crop_h";
inline constexpr const char* kCondTargetWidth = "target_width";
inline constexpr const char* kCondTargetHeight = "target_height";
inline constexpr const char* kCondAestheticScore = "aesthetic_score";
inline constexpr const char* kCondGuidance = "guidance";  // Flux dev's distilled guidance

// A conditioning entry's extras: named integers, reals and tensors, or None (std::monostate: a
// key ComfyUI sets to None, which is not the same as an unset key). A family's diffusion model
// reads the keys it knows (an unset key means the family's default); nodes set them by name.
class CondExtras {
 public:
  using Value = std::variant<int64_t, double, std::shared_ptr<const HostTensor>, std::monostate>;

  void set(const std::string& key, Value v) { values_[key] = std::move(v); }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  bool is_none(const std::string& key) const;  // set to None
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;  // an integer reads as real
  const HostTensor* tensor(const std::string& key) const;         // null when unset
  std::shared_ptr<const HostTensor> tensor_shared(const std::string& key) const;
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  std::map<std::string, Value> values_;
};

// The guidance a Flux-like model embeds for this entry (comfy/model_base.py Flux.extra_conds:
// kwargs.get("guidance", 3.5)): the FluxGuidance / CLIPTextEncodeFlux value, 3.5 when unset,
// nullopt when FluxDisableGuidance set it to None.
inline constexpr double kFluxGuidanceDefault = 3.5;
std::optional<double> cond_guidance(const CondExtras& extras);

struct CondEntry {
  std::shared_ptr<const HostTensor> cond;  // the cross-attention context [1, tokens, width]
  CondExtras extras;
  const HostTensor* pooled() const { return extras.tensor(kCondPooledOutput); }
};
struct Conditioning {
  std::vector<CondEntry> entries;
};

// The entries' contexts for one call of `per` rows each, in order: [entries * per, T, C] with
// T the least common multiple of their token counts, each context repeated along the token
// axis (ComfyUI batches conditionings of different lengths this way; repeated keys leave
// attention unchanged).
HostTensor cond_context_batch(std::span<const CondEntry* const> entries, int64_t per);

// [1, T, C] -> [batch, target_tokens, C], repeating the token axis (target a multiple of T).
HostTensor context_repeat(const HostTensor& c, int64_t batch, int64_t target_tokens);

// a and b stacked on axis 0 (same dtype and trailing shape).
HostTensor tensor_concat0(const HostTensor& a, const HostTensor& b);

// Rows [from, from + n) of a [N, ...] tensor along axis 0.
HostTensor tensor_rows0(const HostTensor& t, int64_t from, int64_t n);

}  // namespace hr
