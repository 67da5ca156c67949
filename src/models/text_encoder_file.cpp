// Text-encoder files: which encoders a file holds, from its keys (comfy/sd.py detect_te_model).
#include "models/text_encoder_file.h"

#include <fmt/format.h>

#include "models/layer_count.h"
#include "models/t5/t5_encoder.h"

namespace hr {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> names_under(const SafetensorsFile& file, const std::string& prefix) {
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : file.entries())
    if (e.name.compare(0, prefix.size(), prefix) == 0)
      names.push_back(e.name.substr(prefix.size()));
  return names;
}

// HF CLIPTextModel layouts: "<prefix>text_model.encoder.layers.0.mlp.fc1.weight".
void find_clip(const SafetensorsFile& file, std::vector<TextEncoderFound>& out) {
  const std::string key = "text_model.encoder.layers.0.mlp.fc1.weight";
  for (const SafetensorsEntry& e : file.entries()) {
    if (!ends_with(e.name, key)) continue;
    const std::string prefix = e.name.substr(0, e.name.size() - key.size());
    const int layers = numbered_layers(names_under(file, prefix), "text_model.encoder.layers.");
    const SafetensorsEntry* emb =
        file.find(prefix + "text_model.embeddings.token_embedding.weight");
    const int64_t width = emb && emb->shape.rank == 2 ? emb->shape[1] : e.shape[1];
    TextEncoderFound f;
    f.kind = layers >= 31 ? "clip_g" : layers >= 23 ? "clip_h" : "clip_l";
    const char* label = layers >= 31 ? "CLIP-G" : layers >= 23 ? "CLIP-H" : "CLIP-L";
    f.prefix = prefix;
    f.description = fmt::format("{} ({} layers, width {})", label, layers, width);
    out.push_back(std::move(f));
  }
}

void find_t5(const SafetensorsFile& file, std::vector<TextEncoderFound>& out) {
  const std::string key = "encoder.final_layer_norm.weight";
  for (const SafetensorsEntry& e : file.entries()) {
    if (!ends_with(e.name, key)) continue;
    const std::string prefix = e.name.substr(0, e.name.size() - key.size());
    if (!file.find(prefix + "shared.weight")) continue;
    TextEncoderFound f;
    f.prefix = prefix;
    Result<T5Config> c = t5_encoder_detect(file, prefix);
    if (c.ok()) {
      f.kind = "t5xxl";
      f.description = fmt::format("T5{} ({} layers, d_model {})",
                                  c->d_model == 4096 && c->layers == 24 ? "-XXL" : " encoder",
                                  c->layers, c->d_model);
    } else {
      f.kind = "t5_unsupported";
      f.description = fmt::format("a T5 encoder headroom cannot run ({})", c.status().message());
    }
    out.push_back(std::move(f));
  }
}

}  // namespace

std::vector<TextEncoderFound> text_encoder_file_detect(const SafetensorsFile& file) {
  std::vector<TextEncoderFound> out;
  find_clip(file, out);
  find_t5(file, out);
  return out;
}

std::string text_encoder_file_describe(const SafetensorsFile& file,
                                       const std::vector<TextEncoderFound>& found) {
  if (found.empty()) {
    std::string keys;
    for (size_t i = 0; i < file.entries().size() && i < 3; ++i)
      keys += (i ? ", " : "") + file.entries()[i].name;
    return fmt::format("no CLIP or T5 text encoder (its first keys: {})",
                       keys.empty() ? "none" : keys);
  }
  std::string s;
  for (size_t i = 0; i < found.size(); ++i) {
    if (i) s += i + 1 == found.size() ? " and " : ", ";
    s += found[i].description;
    if (!found[i].prefix.empty()) s += fmt::format(" under '{}'", found[i].prefix);
  }
  return s;
}

}  // namespace hr
