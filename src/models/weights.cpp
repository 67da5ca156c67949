// WeightSet: host copies, lazy device upload.
#include "models/weights.h"

#include <algorithm>
#include <cstring>

namespace hr {

namespace {

std::string weight_key(const std::string& name, WeightLayout layout) {
  return layout == WeightLayout::STORED ? name : name + "@" + weight_layout_name(layout);
}

}  // namespace

Status WeightSet::load_prefix(const SafetensorsFile& file, std::string_view prefix, DType dtype) {
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    DType target = dtype_is_float(e.dtype) ? dtype : (e.dtype == DType::I32 ? DType::I32 : DType::I64);
    HR_ASSIGN_OR_RETURN(HostTensor t, file.load(e.name, target));
    file.pages_release(e);  // Note [page release]
    put(e.name.substr(prefix.size()), std::move(t));
  }
  file.pages_release();
  return Status();
}

WeightSet::~WeightSet() {
  if (allocator_) allocator_->reclaimable_remove(this);
  device_.clear();
  pinned_clear();
}

void WeightSet::put(const std::string& name, HostTensor t) {
  std::lock_guard<std::mutex> lock(mu_);
  device_.erase(name);
  for (int l = 1; l <= int(WeightLayout::CONV_OHWI); ++l) {
    const std::string k = name + "@" + weight_layout_name(WeightLayout(l));
    device_.erase(k);
    relaid_.erase(k);
  }
  for (auto it = pinned_.begin(); it != pinned_.end();) {
    if (it->first == name || it->first.rfind(name + "@", 0) == 0) {
      pinned_free(it->second);
      it = pinned_.erase(it);
    } else {
      ++it;
    }
  }
  host_[name] = std::move(t);
}

const HostTensor* WeightSet::find(std::string_view name) const {
  auto it = host_.find(name);
  return it == host_.end() ? nullptr : &it->second;
}

std::vector<std::string> WeightSet::names() const {
  std::vector<std::string> out;
  out.reserve(host_.size());
  for (const auto& [k, v] : host_) out.push_back(k);
  return out;
}

uint64_t WeightSet::bytes() const {
  uint64_t n = 0;
  for (const auto& [k, v] : host_) n += v.bytes();
  return n;
}

void WeightSet::bind(Backend* backend, Allocator* allocator) {
  if (allocator != allocator_) {
    if (allocator_) allocator_->reclaimable_remove(this);
    if (allocator) allocator->reclaimable_add(this);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (backend != backend_ || allocator != allocator_) device_.clear();
  if (!allocator || allocator->pinned_account() != pinned_account_) {
    pinned_clear();
    pinned_account_ = allocator ? allocator->pinned_account() : nullptr;
    pinned_backend_ = backend;
  }
  backend_ = backend;
  allocator_ = allocator;
}

void WeightSet::release_device() {
  std::lock_guard<std::mutex> lock(mu_);
  device_.clear();
  relaid_.clear();
}

void WeightSet::run_begin() {
  ++in_use_;
  if (allocator_) last_use_ = allocator_->tick();
}

void WeightSet::run_end() {
  if (allocator_) last_use_ = allocator_->tick();
  if (--in_use_ == 0 && allocator_) allocator_->trim_weights();
}

uint64_t WeightSet::device_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [k, c] : device_) n += c.buffer.size();
  return n;
}

uint64_t WeightSet::reclaim(uint64_t bytes) {
  if (in_use()) return 0;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || in_use()) return 0;
  std::vector<std::pair<uint64_t, std::string>> order;  // (last use, key), oldest first
  for (const auto& [k, c] : device_) order.emplace_back(c.last_use, k);
  std::sort(order.begin(), order.end());
  uint64_t freed = 0;
  for (const auto& [t, k] : order) {
    if (freed >= bytes) break;
    auto it = device_.find(k);
    freed += it->second.buffer.size();
    device_.erase(it);
  }
  return freed;
}

Result<const HostTensor*> WeightSet::host_source(const std::string& name, const TensorDesc& desc,
                                                 WeightLayout layout, std::string* key) {
  auto it = host_.find(name);
  if (it == host_.end())
    return make_error(ErrorCode::NOT_FOUND, "weight '{}' ({}) is not in the checkpoint", name,
                      desc.str());
  const HostTensor& h = it->second;
  Result<TensorDesc> laid = weight_layout_desc(h.desc(), layout);
  if (!laid.ok() || *laid != desc)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "weight '{}' is {} but the graph expects {} (layout {})", name,
                      h.desc().str(), desc.str(), weight_layout_name(layout));
  *key = weight_key(name, layout);
  if (layout == WeightLayout::STORED) return &h;
  auto r = relaid_.find(*key);
  if (r == relaid_.end()) {
    HR_ASSIGN_OR_RETURN(HostTensor t, weight_relayout(h, layout));
    r = relaid_.emplace(*key, std::move(t)).first;
  }
  return &r->second;
}

Result<TensorRef> WeightSet::weight_get(const std::string& name, const TensorDesc& desc,
                                        WeightLayout layout) {
  // In use while it may allocate, so that the allocator's reclaim never asks this set (whose
  // lock is held here) for room; runs hold it in use already.
  ++in_use_;
  struct Release {
    std::atomic<int>& n;
    ~Release() { --n; }
  } release{in_use_};
  std::lock_guard<std::mutex> lock(mu_);
  std::string key;
  HR_ASSIGN_OR_RETURN(const HostTensor* t, host_source(name, desc, layout, &key));
  const bool host = !backend_ || backend_->host_visible();
  if (host && !allocator_) return t->ref();
  if (!allocator_) return make_error(ErrorCode::INTERNAL, "WeightSet bound without allocator");
  auto dit = device_.find(key);
  if (dit == device_.end()) {
    if (host) {  // Note [adopted bytes]: counted, not copied
      HR_ASSIGN_OR_RETURN(DeviceBuffer b, allocator_->adopt(t->ref().data, t->bytes(), Pool::WEIGHTS,
                                                            "weight " + key));
      dit = device_.emplace(key, DeviceCopy{std::move(b), 0}).first;
    } else {
      HR_ASSIGN_OR_RETURN(DeviceBuffer b,
                          allocator_->allocate(t->bytes(), Pool::WEIGHTS, "weight " + key));
      HR_TRY(backend_->copy_h2d(b.data(), t->data(), t->bytes(), nullptr));
      if (layout != WeightLayout::STORED && !pinned_.count(key)) {
        // The upload above is ordered on the default stream; the host copy can go once it ends.
        HR_TRY(backend_->stream_sync(nullptr));
        relaid_.erase(key);
      }
      dit = device_.emplace(key, DeviceCopy{std::move(b), 0}).first;
    }
  }
  dit->second.last_use = allocator_->tick();
  return TensorRef{desc, dit->second.buffer.data()};
}

// Note [pinned copies]: a streamed weight is copied on every call, so its host side must be
// page-locked for the copy to run asynchronously (and to be recorded in a captured step). The
// page-locked copy is made on first use and kept; when the backend refuses page-locked memory
// the pageable tensor is served and the copies become synchronous.
Result<TensorRef> WeightSet::weight_host(const std::string& name, const TensorDesc& desc,
                                         WeightLayout layout) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string key;
  HR_ASSIGN_OR_RETURN(const HostTensor* t, host_source(name, desc, layout, &key));
  if (!backend_ || backend_->host_visible()) return t->ref();
  auto it = pinned_.find(key);
  if (it == pinned_.end()) {
    void* p = allocator_ ? allocator_->pinned_alloc(t->bytes()) : nullptr;
    if (!p) return t->ref();  // Note [pinned budget]: pageable, copied synchronously
    std::memcpy(p, t->data(), t->bytes());
    it = pinned_.emplace(key, std::pair<void*, size_t>{p, t->bytes()}).first;
    if (layout != WeightLayout::STORED) relaid_.erase(key);
  }
  return TensorRef{desc, it->second.first};
}

void WeightSet::weight_evict(const std::string& name, WeightLayout layout) {
  std::lock_guard<std::mutex> lock(mu_);
  device_.erase(weight_key(name, layout));
}

uint64_t WeightSet::pinned_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [k, p] : pinned_) n += p.second;
  return n;
}

void WeightSet::pinned_clear() {
  for (auto& [k, p] : pinned_) pinned_free(p);
  pinned_.clear();
}

void WeightSet::pinned_free(const std::pair<void*, size_t>& p) {
  pinned_backend_->host_free_pinned(p.first);
  pinned_account_->held -= p.second;
  ++pinned_account_->frees;
}

}  // namespace hr
