// WeightSet: host copies, lazy device upload, page-locked copies for streaming.
#include "memory/weight_set.h"

#include <algorithm>
#include <cstring>

#include "core/mapped_pages.h"
#include "memory/eviction.h"

namespace hr {

// Note [mapped weights]
// A checkpoint stored in the compute dtype (an f16 SDXL file run in f16) needs no conversion, so
// its tensors are views of the file's read-only mapping instead of copies (weights_load_prefix
// in models/weight_load.cpp puts them with put_mapped): loading reads nothing, and the host side
// of a model costs no memory of its own. On a GPU a weight's pages are read when it is first
// uploaded (or copied to page-locked memory for streaming) and given back right after
// (mapped_pages_release); a weight evicted and uploaded again reads them again, from the page
// cache or the disk. Host RSS then holds what is being copied, the page-locked copies of
// streamed weights and converted tensors: one host copy per weight at most, where copies of
// every tensor took the checkpoint's size again (issue: RSS at most ~1.1x the checkpoint). On
// the CPU the views are computed on in place. The mapping is private and read-only: nothing may
// write into a weight's host tensor (put() replaces it). A checkpoint rewritten in place
// (truncated) under a running process would fault on the next upload; headroom's own writers
// replace files by rename, which keeps the mapped inode.
void WeightSet::put_mapped(const std::string& name, HostTensor t) {
  const bool mapped = t.is_view();
  put(name, std::move(t));
  if (!mapped) return;
  std::lock_guard<std::mutex> lock(mu_);
  mapped_.insert(name);
}

WeightSet::~WeightSet() {
  if (allocator_) allocator_->reclaimable_remove(this);
  device_.clear();
  pinned_clear();
}

void WeightSet::put(const std::string& name, HostTensor t) {
  std::lock_guard<std::mutex> lock(mu_);
  mapped_.erase(name);
  // Every copy made from the old tensor is stale: its layouts, and the stacked weights it is a
  // part of (Note [weight layouts], Note [weight keys]).
  auto stale = [&](const std::string& key) {
    const auto [base, layout] = weight_key_split(key);
    if (layout != WeightLayout::STACK) return base == name;
    for (const std::string& p : weight_stack_parts(base))
      if (p == name) return true;
    return false;
  };
  std::erase_if(device_, [&](const auto& kv) { return stale(kv.first); });
  std::erase_if(relaid_, [&](const auto& kv) { return stale(kv.first); });
  std::erase_if(pinned_, [&](const auto& kv) { return stale(kv.first); });
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

void WeightSet::allocator_gone() {
  std::lock_guard<std::mutex> lock(mu_);
  device_.clear();  // into the allocator, which is still alive while it tells its holders
  allocator_ = nullptr;
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
  return device_copies_bytes(device_);
}

uint64_t WeightSet::reclaim(uint64_t bytes) {
  if (in_use()) return 0;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || in_use()) return 0;
  return device_copies_evict(device_, bytes);  // Note [eviction policy]
}

uint64_t WeightSet::reclaim_block(uint64_t bytes) {
  if (in_use()) return 0;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || in_use()) return 0;
  return device_copies_evict_block(device_, bytes);  // Note [eviction policy]
}

Result<std::string> WeightSet::stack_check(const std::string& name,
                                           const TensorDesc& desc) const {
  std::vector<TensorDesc> parts;
  for (const std::string& p : weight_stack_parts(name)) {
    auto it = host_.find(p);
    if (it == host_.end())
      return make_error(ErrorCode::NOT_FOUND, "weight '{}' (part of a stacked weight) is not in "
                        "the checkpoint", p);
    parts.push_back(it->second.desc());
  }
  Result<TensorDesc> stacked = weight_stack_desc(parts);
  if (!stacked.ok() || *stacked != desc)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "stacked weight '{}': its parts do not stack into {}", name, desc.str());
  return weight_key(name, WeightLayout::STACK);
}

Result<std::string> WeightSet::host_check(const std::string& name, const TensorDesc& desc,
                                          WeightLayout layout) const {
  if (layout == WeightLayout::STACK) return stack_check(name, desc);
  auto it = host_.find(name);
  if (it == host_.end())
    return make_error(ErrorCode::NOT_FOUND, "weight '{}' ({}) is not in the checkpoint", name,
                      desc.str());
  Result<TensorDesc> laid = weight_layout_desc(it->second.desc(), layout);
  if (!laid.ok() || *laid != desc)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "weight '{}' is {} but the graph expects {} (layout {})", name,
                      it->second.desc().str(), desc.str(), weight_layout_name(layout));
  return weight_key(name, layout);
}

Result<const HostTensor*> WeightSet::host_source(const std::string& name, const TensorDesc& desc,
                                                 WeightLayout layout, std::string* key) {
  HR_ASSIGN_OR_RETURN(*key, host_check(name, desc, layout));
  if (layout == WeightLayout::STORED) return &host_.at(name);
  auto r = relaid_.find(*key);
  if (r == relaid_.end()) {
    HostTensor t;
    if (layout == WeightLayout::STACK) {
      std::vector<const HostTensor*> parts;
      for (const std::string& p : weight_stack_parts(name)) parts.push_back(&host_.at(p));
      HR_ASSIGN_OR_RETURN(t, weight_stack(parts));
    } else {
      HR_ASSIGN_OR_RETURN(t, weight_relayout(host_.at(name), layout));
    }
    r = relaid_.emplace(*key, std::move(t)).first;
  }
  return &r->second;
}

Result<TensorRef> WeightSet::weight_get(const std::string& name, const TensorDesc& desc,
                                        WeightLayout layout) {
  // In use while it may allocate, so that the allocator's reclaim never asks this set (whose
  // lock is held here) for room; runs hold it in use already.
  const InUseScope in_use(in_use_);
  std::lock_guard<std::mutex> lock(mu_);
  // A resident copy needs no host source: rearranging it again on every run cost CPU time and
  // kept a second host copy of every rearranged weight.
  HR_ASSIGN_OR_RETURN(std::string key, host_check(name, desc, layout));
  auto dit = device_.find(key);
  if (dit == device_.end() || !allocator_) {
    HR_ASSIGN_OR_RETURN(const HostTensor* t, host_source(name, desc, layout, &key));
    const bool host = !backend_ || backend_->memory_is_host();
    if (host && !allocator_) return t->ref();
    if (!allocator_) return make_error(ErrorCode::INTERNAL, "WeightSet bound without allocator");
    if (host) {  // Note [adopted bytes]: counted, not copied
      HR_ASSIGN_OR_RETURN(DeviceBuffer b, allocator_->adopt(t->ref().data, t->bytes(), Pool::WEIGHTS,
                                                            "weight " + key));
      dit = device_.emplace(key, DeviceCopy{std::move(b), 0}).first;
    } else {
      HR_ASSIGN_OR_RETURN(DeviceBuffer b,
                          allocator_->allocate(t->bytes(), Pool::WEIGHTS, "weight " + key));
      auto pit = pinned_.find(key);  // a weight streamed before: its page-locked copy is faster
      const void* src = pit != pinned_.end() ? pit->second.data : t->data();
      HR_TRY(backend_->copy_h2d(b.data(), src, t->bytes(), nullptr));
      // The upload is ordered on the default stream; a rearranged host copy can go once it ends.
      if (layout != WeightLayout::STORED) HR_TRY(backend_->stream_sync(nullptr));
      host_source_done(name, key);
      dit = device_.emplace(key, DeviceCopy{std::move(b), 0}).first;
    }
  }
  dit->second.last_use = allocator_->tick();
  return TensorRef{desc, dit->second.buffer.data()};
}

// Note [pinned copies]: a streamed weight is copied on every call, so its host side must be
// page-locked for the copy to run asynchronously (and to be recorded in a captured step). The
// page-locked copy is made on first use and kept; when the backend or the pinned budget refuses
// page-locked memory the pageable tensor is served and the copies become synchronous. The
// executor asks for all of a call's streamed weights at once (weight_host_all) and gets those
// copied now in one block, in streaming order and padded like the ring, so that it can move
// neighbours with one transfer (Note [coalesced copies] in graph/stream_copies.cpp). Once copied, a
// mapped source gives its pages back and a rearranged copy is dropped: one host copy each.
struct WeightSet::PinnedBlock {
  Backend* backend = nullptr;
  std::shared_ptr<Allocator::PinnedAccount> account;
  void* data = nullptr;
  size_t bytes = 0;
  ~PinnedBlock() {
    backend->host_free_pinned(data);
    account->held -= bytes;
    ++account->frees;
  }
};

bool WeightSet::pinned_make(const std::vector<const WeightRequest*>& requests, size_t align) {
  if (requests.empty()) return true;
  align = std::max<size_t>(align, 1);
  auto padded = [align](size_t n) { return (std::max<size_t>(n, 1) + align - 1) / align * align; };
  size_t total = 0;
  for (const WeightRequest* q : requests) total += padded(q->desc.bytes());
  void* p = allocator_ ? allocator_->pinned_alloc(total) : nullptr;
  if (!p) return false;  // Note [pinned budget]
  auto block = std::make_shared<PinnedBlock>();
  block->backend = pinned_backend_;
  block->account = pinned_account_;
  block->data = p;
  block->bytes = total;
  size_t at = 0;
  // One weight at a time: its host source (rearranged now if need be) is copied in and given
  // back before the next is made, so host memory peaks at the block plus one weight.
  for (const WeightRequest* q : requests) {
    std::string key;
    Result<const HostTensor*> t = host_source(q->name, q->desc, q->layout, &key);
    if (!t.ok()) continue;  // checked by the caller already
    char* dst = static_cast<char*>(p) + at;
    if (!(*t)->is_placeholder()) std::memcpy(dst, (*t)->data(), (*t)->bytes());
    pinned_[key] = Pinned{dst, (*t)->bytes(), block};
    host_source_done(q->name, key);
    at += padded(q->desc.bytes());
  }
  return true;
}

void WeightSet::host_source_done(const std::string& name, const std::string& key) {
  if (key != name) relaid_.erase(key);
  const bool stacked = key == weight_key(name, WeightLayout::STACK);
  for (const std::string& part : stacked ? weight_stack_parts(name) : std::vector{name}) {
    if (!mapped_.count(part)) continue;
    const HostTensor& t = host_.at(part);
    mapped_pages_release(t.data(), t.bytes());  // Note [mapped weights]
  }
}

Result<TensorRef> WeightSet::weight_host(const std::string& name, const TensorDesc& desc,
                                         WeightLayout layout) {
  HR_ASSIGN_OR_RETURN(std::vector<TensorRef> r,
                      weight_host_all({WeightRequest{name, desc, layout}}, 1));
  return r.front();
}

Result<std::vector<TensorRef>> WeightSet::weight_host_all(const std::vector<WeightRequest>& requests,
                                                          size_t align) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool host = !backend_ || backend_->memory_is_host();
  std::vector<std::string> keys;
  std::vector<const WeightRequest*> missing;
  for (const WeightRequest& q : requests) {
    HR_ASSIGN_OR_RETURN(std::string key, host_check(q.name, q.desc, q.layout));
    if (!host && !pinned_.count(key)) missing.push_back(&q);
    keys.push_back(std::move(key));
  }
  if (!pinned_make(missing, align))  // one by one when a single block does not fit
    for (const WeightRequest* q : missing) pinned_make({q}, 1);
  std::vector<TensorRef> out;
  for (size_t i = 0; i < requests.size(); ++i) {
    const WeightRequest& q = requests[i];
    auto it = pinned_.find(keys[i]);
    if (it != pinned_.end()) {
      out.push_back(TensorRef{q.desc, it->second.data});
      continue;
    }
    std::string key;  // host-visible, or pageable beyond the pinned budget: copied synchronously
    HR_ASSIGN_OR_RETURN(const HostTensor* t, host_source(q.name, q.desc, q.layout, &key));
    out.push_back(TensorRef{q.desc, const_cast<void*>(t->data())});
  }
  return out;
}

void WeightSet::weight_evict(const std::string& name, WeightLayout layout) {
  std::lock_guard<std::mutex> lock(mu_);
  device_.erase(weight_key(name, layout));
}

uint64_t WeightSet::pinned_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [k, p] : pinned_) n += p.bytes;
  return n;
}

uint64_t WeightSet::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const std::string& name : mapped_) n += host_.at(name).bytes();
  return n;
}

}  // namespace hr
