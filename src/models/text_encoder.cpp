// Prompt parts shared by the text-encoder nodes.
#include "models/text_encoder.h"

namespace hr {

std::map<std::string, std::string> text_parts_all(const TextEncoder& encoder,
                                                  const std::string& text) {
  std::map<std::string, std::string> texts;
  for (const std::string& p : encoder.parts()) texts[p] = text;
  return texts;
}

}  // namespace hr
