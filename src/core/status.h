// Status and Result<T>: the error type every layer returns. An out-of-memory Status carries
// the memory-segment breakdown (context / weights / activations) so the message can say who holds what.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace hr {

enum class ErrorCode : uint8_t {
  OK = 0,
  INVALID_ARGUMENT,  // bad input from a user or caller (shapes, values, JSON)
  NOT_FOUND,         // missing file, key, node
  IO,                // read/write failure
  CORRUPT,           // malformed file contents
  UNSUPPORTED,       // valid request the implementation does not handle
  OUT_OF_MEMORY,     // allocation failed or budget exceeded
  CANCELLED,         // interrupted by the user
  INTERNAL,          // a bug
};

const char* error_code_name(ErrorCode code);

// What held memory when an allocation failed, per lens (allocator level, bytes).
struct MemorySegments {
  uint64_t requested = 0;    // bytes of the failed request
  uint64_t budget = 0;       // allocator budget (UINT64_MAX = unlimited)
  uint64_t context = 0;      // fixed overhead (context, library workspaces)
  uint64_t weights = 0;      // resident weights
  uint64_t activations = 0;  // activation arenas
  uint64_t other = 0;        // everything else the allocator holds
  std::string str() const;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == ErrorCode::OK; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>" for logs and CLI output.
  std::string str() const;

  // Prefixes context to the message ("loading foo.safetensors: " + message).
  Status with_context(const std::string& context) const;

  const std::optional<MemorySegments>& segments() const { return segments_; }
  Status& set_segments(const MemorySegments& s) {
    segments_ = s;
    return *this;
  }

 private:
  ErrorCode code_ = ErrorCode::OK;
  std::string message_;
  std::optional<MemorySegments> segments_;
};

template <typename... Args>
Status make_error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// Result<T>: a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(implicit)
    if (std::get<Status>(v_).ok()) v_ = Status(ErrorCode::INTERNAL, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  const T* operator->() const { return &std::get<T>(v_); }
  T& operator*() & { return std::get<T>(v_); }
  const T& operator*() const& { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

#define HR_CONCAT_INNER(a, b) a##b
#define HR_CONCAT(a, b) HR_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when it is not OK.
#define HR_TRY(expr)                          \
  do {                                        \
    ::hr::Status hr_try_status_ = (expr);     \
    if (!hr_try_status_.ok()) return hr_try_status_; \
  } while (0)

// `HR_ASSIGN_OR_RETURN(auto x, make_x());` unwraps a Result or returns its Status.
#define HR_ASSIGN_OR_RETURN(lhs, expr) \
  HR_ASSIGN_OR_RETURN_IMPL(HR_CONCAT(hr_result_, __LINE__), lhs, expr)
#define HR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

}  // namespace hr
