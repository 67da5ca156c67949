// LLM text-encoder configurations: the presets, the tensor list of the HF layout and detection
// from a checkpoint's keys and shapes.
#include "models/llm/llm_config.h"

#include <array>
#include <functional>
#include <optional>

#include "models/layer_count.h"

namespace hr {
namespace {

constexpr const char* kEmbed = "model.embed_tokens.weight";
constexpr const char* kNorm = "model.norm.weight";
constexpr const char* kLayers = "model.layers.";

std::string layer_key(int i, const char* rest) { return kLayers + std::to_string(i) + "." + rest; }

using Find = std::function<std::optional<Shape>(const std::string&)>;

// Presets from the published config.json files (Qwen/Qwen3-4B, Qwen/Qwen3-8B,
// Qwen/Qwen2.5-VL-7B-Instruct's text part; ComfyUI's Qwen25_7BVLI_Config has the same numbers).
LLMConfig preset(int64_t vocab, int64_t hidden, int64_t intermediate, int layers, int heads,
                 int kv_heads, bool qkv_bias, bool qk_norm) {
  LLMConfig c;
  c.vocab = vocab;
  c.hidden = hidden;
  c.intermediate = intermediate;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = 128;
  c.rope_theta = 1e6f;
  c.rms_eps = 1e-6f;
  c.qkv_bias = qkv_bias;
  c.qk_norm = qk_norm;
  return c;
}

bool same_shape(const LLMConfig& a, const LLMConfig& b) {
  return a.vocab == b.vocab && a.hidden == b.hidden && a.intermediate == b.intermediate &&
         a.layers == b.layers && a.heads == b.heads && a.kv_heads == b.kv_heads &&
         a.head_dim == b.head_dim && a.qkv_bias == b.qkv_bias && a.qk_norm == b.qk_norm;
}

Status need(const Find& find, const std::string& name, int rank, Shape* out) {
  std::optional<Shape> s = find(name);
  if (!s) return make_error(ErrorCode::INVALID_ARGUMENT, "LLM encoder: '{}' is missing", name);
  if (s->rank != rank)
    return make_error(ErrorCode::INVALID_ARGUMENT, "LLM encoder: '{}' is {}, not {}-D", name,
                      s->str(), rank);
  *out = *s;
  return Status();
}

Result<LLMConfig> detect_from(const std::vector<std::string>& names, const Find& find,
                              int64_t head_dim) {
  LLMConfig c;
  c.head_dim = head_dim;
  Shape embed, q, k, gate;
  HR_TRY(need(find, kEmbed, 2, &embed));
  c.vocab = embed[0];
  c.hidden = embed[1];
  c.layers = numbered_layers(names, kLayers);
  if (c.layers == 0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "LLM encoder: no '{}N' tensors", kLayers);
  c.qk_norm = find(layer_key(0, "self_attn.q_norm.weight")).has_value();
  c.qkv_bias = find(layer_key(0, "self_attn.q_proj.bias")).has_value();
  if (c.qk_norm) {
    Shape qn;
    HR_TRY(need(find, layer_key(0, "self_attn.q_norm.weight"), 1, &qn));
    c.head_dim = qn[0];
  }
  HR_TRY(need(find, layer_key(0, "self_attn.q_proj.weight"), 2, &q));
  HR_TRY(need(find, layer_key(0, "self_attn.k_proj.weight"), 2, &k));
  if (c.head_dim < 2 || c.head_dim % 2 != 0 || q[0] % c.head_dim != 0 || k[0] % c.head_dim != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "LLM encoder: q_proj {} / k_proj {} do not split into heads of {}", q.str(),
                      k.str(), c.head_dim);
  c.heads = int(q[0] / c.head_dim);
  c.kv_heads = int(k[0] / c.head_dim);
  if (c.kv_heads < 1 || c.heads % c.kv_heads != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "LLM encoder: {} query heads are not a multiple of {} key/value heads",
                      c.heads, c.kv_heads);
  HR_TRY(need(find, layer_key(0, "mlp.gate_proj.weight"), 2, &gate));
  c.intermediate = gate[0];
  for (const auto& [name, shape] : llm_tensors(c)) {
    std::optional<Shape> s = find(name);
    if (!s) return make_error(ErrorCode::INVALID_ARGUMENT, "LLM encoder: '{}' is missing", name);
    if (*s != shape)
      return make_error(ErrorCode::INVALID_ARGUMENT, "LLM encoder: '{}' is {}, expected {}", name,
                        s->str(), shape.str());
  }
  for (const LLMConfig& p : {llm_config_qwen3_4b(), llm_config_qwen3_8b(), llm_config_qwen25_7b()})
    if (same_shape(c, p)) return p;
  return c;
}

}  // namespace

LLMConfig llm_config_qwen3_4b() { return preset(151936, 2560, 9728, 36, 32, 8, false, true); }
LLMConfig llm_config_qwen3_8b() { return preset(151936, 4096, 12288, 36, 32, 8, false, true); }
LLMConfig llm_config_qwen25_7b() { return preset(152064, 3584, 18944, 28, 28, 4, true, false); }

Result<LLMConfig> llm_config_preset(std::string_view name) {
  if (name == "qwen3_4b") return llm_config_qwen3_4b();
  if (name == "qwen3_8b") return llm_config_qwen3_8b();
  if (name == "qwen25_7b") return llm_config_qwen25_7b();
  return make_error(ErrorCode::NOT_FOUND,
                    "no LLM preset '{}' (known: qwen3_4b, qwen3_8b, qwen25_7b)", name);
}

Result<int> llm_output_index(const LLMConfig& c) {
  const int n = c.layers + 1;
  const int i = c.output_hidden_state < 0 ? n + c.output_hidden_state : c.output_hidden_state;
  if (i < 0 || i >= n)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "LLM encoder: hidden state {} of a {}-layer model (which has {})",
                      c.output_hidden_state, c.layers, n);
  return i;
}

std::vector<std::pair<std::string, Shape>> llm_tensors(const LLMConfig& c) {
  const int64_t D = c.hidden, F = c.intermediate, Q = c.heads * c.head_dim,
                KV = c.kv_heads * c.head_dim;
  std::vector<std::pair<std::string, Shape>> t = {{kEmbed, Shape{c.vocab, D}}};
  for (int i = 0; i < c.layers; ++i) {
    auto add = [&](const char* rest, Shape s) { t.push_back({layer_key(i, rest), s}); };
    add("input_layernorm.weight", Shape{D});
    add("self_attn.q_proj.weight", Shape{Q, D});
    add("self_attn.k_proj.weight", Shape{KV, D});
    add("self_attn.v_proj.weight", Shape{KV, D});
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", Shape{Q});
      add("self_attn.k_proj.bias", Shape{KV});
      add("self_attn.v_proj.bias", Shape{KV});
    }
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", Shape{c.head_dim});
      add("self_attn.k_norm.weight", Shape{c.head_dim});
    }
    add("self_attn.o_proj.weight", Shape{D, Q});
    add("post_attention_layernorm.weight", Shape{D});
    add("mlp.gate_proj.weight", Shape{F, D});
    add("mlp.up_proj.weight", Shape{F, D});
    add("mlp.down_proj.weight", Shape{D, F});
  }
  t.push_back({kNorm, Shape{D}});
  return t;
}

Result<std::string> llm_encoder_prefix(const SafetensorsFile& file) {
  const std::string key = kEmbed;
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.size() < key.size() || e.name.compare(e.name.size() - key.size(), key.size(), key))
      continue;
    std::string prefix = e.name.substr(0, e.name.size() - key.size());
    if (file.find(prefix + layer_key(0, "self_attn.q_proj.weight"))) return prefix;
  }
  return make_error(ErrorCode::NOT_FOUND,
                    "no LLM text encoder in this file (no '[prefix]{}' beside "
                    "'[prefix]{}0.self_attn.q_proj.weight')",
                    kEmbed, kLayers);
}

Result<LLMConfig> llm_config_detect(const WeightSet& w, int64_t head_dim) {
  return detect_from(
      w.names(),
      [&w](const std::string& name) -> std::optional<Shape> {
        const HostTensor* t = w.find(name);
        return t ? std::optional<Shape>(t->shape()) : std::nullopt;
      },
      head_dim);
}

Result<LLMConfig> llm_config_detect(const SafetensorsFile& file, std::string_view prefix,
                                    int64_t head_dim) {
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : file.entries())
    if (e.name.compare(0, prefix.size(), prefix) == 0)
      names.push_back(e.name.substr(prefix.size()));
  return detect_from(
      names,
      [&](const std::string& name) -> std::optional<Shape> {
        const SafetensorsEntry* e = file.find(std::string(prefix) + name);
        return e ? std::optional<Shape>(e->shape) : std::nullopt;
      },
      head_dim);
}

}  // namespace hr
