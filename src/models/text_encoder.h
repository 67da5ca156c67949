// The text-encoder component of a loaded model: a family's tokenizer and encoder(s) turning
// prompt text into a conditioning entry (context plus the family's extras).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/executor.h"
#include "models/conditioning.h"
#include "models/family.h"
#include "memory/weight_set.h"

namespace hr {

// Per encoder of a text-encoder component, the weights it reads (null: its own store).
using EncoderSources = std::vector<WeightSource*>;

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  virtual const ModelFamily& family() const = 0;
  // The prompt parts this component encodes, one per encoder (ComfyUI's token dict keys: SD1
  // {"l"}, SD2 {"h"}, SDXL {"l", "g"}, the SDXL refiner {"g"}).
  virtual std::vector<std::string> parts() const = 0;
  // Its encoders' weight stores, in order (what a LoRA's text-encoder keys index).
  virtual std::vector<std::shared_ptr<WeightSet>> stores() const = 0;
  // What makes a weight name of encoder i's store ComfyUI's model key (prefix + name), where
  // the store's names are ComfyUI's own; "" where they are not (the seed of a LoRA's rounding
  // to fp8, Note [fp8 patches] in memory/fp8_patch.cpp).
  virtual std::string comfy_key_prefix(size_t i) const { return ""; }
  // Encodes the parts present in `texts` (at least one) into one entry; `layer` is
  // CLIPSetLastLayer's value (0: the family's default). CLIPTextEncode gives every part the
  // same text. Encoder i reads its weights from sources[i] when that is set (a patched view of
  // its store, Note [patched weights]), else from its store.
  virtual Result<CondEntry> encode(Executor& ex, const std::map<std::string, std::string>& texts,
                                   int layer, const EncoderSources& sources) const = 0;
};

// Every part of `encoder` with the same text (CLIPTextEncode).
std::map<std::string, std::string> text_parts_all(const TextEncoder& encoder,
                                                  const std::string& text);

}  // namespace hr
