// CondExtras accessors and the batching of conditioning entries into one model call.
#include "models/conditioning.h"

#include <cstring>
#include <numeric>

namespace hr {

std::optional<int64_t> CondExtras::get_int(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
  return std::nullopt;
}

std::optional<double> CondExtras::get_float(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  if (const double* v = std::get_if<double>(&it->second)) return *v;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return double(*v);
  return std::nullopt;
}

bool CondExtras::is_none(const std::string& key) const {
  auto it = values_.find(key);
  return it != values_.end() && std::holds_alternative<std::monostate>(it->second);
}

std::optional<double> cond_guidance(const CondExtras& extras) {
  if (!extras.has(kCondGuidance)) return kFluxGuidanceDefault;
  return extras.get_float(kCondGuidance);  // None (or a non-number) -> nullopt
}

std::shared_ptr<const HostTensor> CondExtras::tensor_shared(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return nullptr;
  if (const auto* v = std::get_if<std::shared_ptr<const HostTensor>>(&it->second)) return *v;
  return nullptr;
}

const HostTensor* CondExtras::tensor(const std::string& key) const {
  return tensor_shared(key).get();
}

HostTensor context_repeat(const HostTensor& c, int64_t batch, int64_t target_tokens) {
  const Shape& s = c.shape();
  int64_t t = s[1], ch = s[2];
  HostTensor out(DType::F32, Shape{batch, target_tokens, ch});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < target_tokens / t; ++r)
      std::memcpy(out.f32() + (b * target_tokens + r * t) * ch, c.f32(), size_t(t * ch) * 4);
  return out;
}

HostTensor tensor_concat0(const HostTensor& a, const HostTensor& b) {
  Shape s = a.shape();
  s[0] += b.shape()[0];
  HostTensor out(a.dtype(), s);
  std::memcpy(out.data(), a.data(), a.bytes());
  std::memcpy(static_cast<char*>(out.data()) + a.bytes(), b.data(), b.bytes());
  return out;
}

HostTensor tensor_rows0(const HostTensor& t, int64_t from, int64_t n) {
  Shape s = t.shape();
  const size_t row_bytes = t.bytes() / size_t(s[0]);
  s[0] = n;
  HostTensor out(t.dtype(), s);
  std::memcpy(out.data(), static_cast<const char*>(t.data()) + size_t(from) * row_bytes,
              size_t(n) * row_bytes);
  return out;
}

HostTensor cond_context_batch(std::span<const CondEntry* const> entries, int64_t per) {
  int64_t tokens = 1;
  for (const CondEntry* e : entries) tokens = std::lcm(tokens, e->cond->shape()[1]);
  HostTensor context;
  for (size_t i = 0; i < entries.size(); ++i) {
    HostTensor c = context_repeat(*entries[i]->cond, per, tokens);
    context = i == 0 ? std::move(c) : tensor_concat0(context, c);
  }
  return context;
}

}  // namespace hr
