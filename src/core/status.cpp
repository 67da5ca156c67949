// Status formatting.
#include "core/status.h"

#include "core/bytes.h"

namespace hr {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::OK: return "ok";
    case ErrorCode::INVALID_ARGUMENT: return "invalid argument";
    case ErrorCode::NOT_FOUND: return "not found";
    case ErrorCode::IO: return "i/o error";
    case ErrorCode::CORRUPT: return "corrupt input";
    case ErrorCode::UNSUPPORTED: return "unsupported";
    case ErrorCode::OUT_OF_MEMORY: return "out of memory";
    case ErrorCode::CANCELLED: return "cancelled";
    case ErrorCode::INTERNAL: return "internal error";
  }
  return "unknown error";
}

std::string MemorySegments::str() const {
  return fmt::format(
      "requested {}, budget {} (allocator level): context {}, weights {}, activations {}, other {}",
      bytes_format(requested), bytes_format(budget), bytes_format(context), bytes_format(weights),
      bytes_format(activations), bytes_format(other));
}

std::string Status::str() const {
  if (ok()) return "ok";
  std::string s = fmt::format("{}: {}", error_code_name(code_), message_);
  if (segments_) s += " [" + segments_->str() + "]";
  return s;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  Status s(code_, context + ": " + message_);
  s.segments_ = segments_;
  return s;
}

}  // namespace hr
