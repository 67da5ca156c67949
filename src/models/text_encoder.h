// The text-encoder component of a loaded model: a family's tokenizer and encoder(s) turning
// prompt text into a conditioning entry (context plus the family's extras).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/executor.h"
#include "models/conditioning.h"
#include "models/family.h"

namespace hr {

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  virtual const ModelFamily& family() const = 0;
  // The prompt parts this component encodes, one per encoder (ComfyUI's token dict keys: SD1
  // {"l"}, SD2 {"h"}, SDXL {"l", "g"}, the SDXL refiner {"g"}).
  virtual std::vector<std::string> parts() const = 0;
  // Encodes the parts present in `texts` (at least one) into one entry; `layer` is
  // CLIPSetLastLayer's value (0: the family's default). CLIPTextEncode gives every part the
  // same text.
  virtual Result<CondEntry> encode(Executor& ex, const std::map<std::string, std::string>& texts,
                                   int layer) const = 0;
};

// Every part of `encoder` with the same text (CLIPTextEncode).
std::map<std::string, std::string> text_parts_all(const TextEncoder& encoder,
                                                  const std::string& text);

}  // namespace hr
