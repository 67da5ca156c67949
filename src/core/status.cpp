// Status formatting.
#include "core/status.h"

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

static std::string bytes_str(uint64_t b) {
  if (b == UINT64_MAX) return "unlimited";
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", double(b) / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", double(b) / double(1ull << 10));
  return fmt::format("{} B", b);
}

std::string MemorySegments::str() const {
  return fmt::format(
      "requested {}, budget {} (allocator level): context {}, weights {}, activations {}, other {}",
      bytes_str(requested), bytes_str(budget), bytes_str(context), bytes_str(weights),
      bytes_str(activations), bytes_str(other));
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
