// PatchedWeights: patched device copies made from the store's originals, and the patching of
// streamed weights in the ring.
#include "memory/patched_weights.h"

#include <algorithm>

#include "core/alignment.h"
#include "core/bytes.h"
#include "memory/eviction.h"
#include "memory/fp8_patch.h"

namespace hr {

// Note [fused in place]
// A streamed weight is patched where it landed in the ring, but the fused GEMM must not write
// the matrix it adds: the backend may run a GEMM more than once (the CUDA backend times its
// candidate algorithms on first use of a shape), and with the output as its addend each run
// would add the difference again. So the copy in the ring is copied once more, into the scratch,
// and the GEMM reads that: 8 bytes a parameter in f16 instead of 4, still far below the float32
// ops. The scratch's float32 elements that hold one such copy:
int64_t fused_copy_elems(const Shape& stored, DType dtype) {
  return (stored.numel() * int64_t(dtype_size(dtype)) + 11) / 12;
}

// The most bytes of factors resident patching leaves pending before it waits for the ops.
constexpr uint64_t kPendingMost = 16ull << 20;


PatchedWeights::PatchedWeights(std::shared_ptr<WeightSet> base,
                               std::shared_ptr<const PatchSet> patches)
    : base_(std::move(base)), patches_(std::move(patches)) {}

PatchedWeights::~PatchedWeights() {
  if (allocator_) allocator_->reclaimable_remove(this);
  pending_release();
  device_.clear();
  streamed_.clear();
}

void PatchedWeights::bind(Backend* backend, Allocator* allocator) {
  base_->bind(backend, allocator);
  if (allocator != allocator_) {
    if (allocator_) allocator_->reclaimable_remove(this);
    if (allocator) allocator->reclaimable_add(this);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (backend != backend_ || allocator != allocator_) {
    pending_release();
    device_.clear();
    streamed_.clear();
    extra_.clear();
    fp8_host_.clear();
    scratch_.reset();
    workspace_.reset();
  }
  backend_ = backend;
  allocator_ = allocator;
}

void PatchedWeights::allocator_gone() {
  std::lock_guard<std::mutex> lock(mu_);
  pending_release();
  device_.clear();
  streamed_.clear();
  extra_.clear();
  scratch_.reset();
  workspace_.reset();
  allocator_ = nullptr;
}

bool PatchedWeights::weight_patched(const std::string& name, WeightLayout layout) const {
  if (layout != WeightLayout::STACK) return patches_->find(name) != nullptr;
  for (const std::string& p : weight_stack_parts(name))
    if (patches_->find(p)) return true;
  return false;
}

Result<std::vector<PatchedWeights::Part>> PatchedWeights::parts_of(const std::string& name,
                                                                   const TensorDesc& desc,
                                                                   WeightLayout layout) const {
  std::vector<std::string> names =
      layout == WeightLayout::STACK ? weight_stack_parts(name) : std::vector<std::string>{name};
  std::vector<Part> parts;
  size_t offset = 0;
  for (const std::string& n : names) {
    const HostTensor* h = base_->find(n);
    if (!h)
      return make_error(ErrorCode::NOT_FOUND, "weight '{}' is not in the checkpoint", n);
    Part p{n, offset, h->shape(), layout == WeightLayout::CONV_OHWI, patches_->find(n)};
    if (p.patches) HR_TRY(patches_check(n, p.stored, *p.patches));
    if (p.patches && dtype_is_fp8(h->dtype()) && patches_->comfy_prefix.empty())
      return make_error(ErrorCode::UNSUPPORTED,
                        "LoRA patches on the fp8 weight '{}' ({}) are not supported for this "
                        "encoder layout yet (ComfyUI's key, its rounding's seed, is not known)", n,
                        patches_->id);
    if (p.ohwi && p.stored.rank != 4)
      return make_error(ErrorCode::INVALID_ARGUMENT, "weight '{}' is not a 4-d filter", n);
    offset += size_t(h->numel()) * dtype_size(desc.dtype);
    parts.push_back(std::move(p));
  }
  return parts;
}

Result<HostTensor> PatchedWeights::multiplier_of(const Part& p, size_t index) const {
  return dora_multiplier(*base_->find(p.name), *p.patches, index);
}

bool PatchedWeights::fused_here(const Part& p, DType dtype) const {
  return p.patches && !backend_->memory_is_host() && patches_fusable(*p.patches, dtype, p.ohwi);
}

// Note [patched weights]: factors are read where they are on a host-memory backend, uploaded
// otherwise, in the fused form where the part takes it (Note [fused low-rank patches]). The
// uploads are ordered on the default stream before the ops; their host sources (the patch set's,
// or the fused copies in the result) must live until those copies ran.
Result<PatchedWeights::PartFactors> PatchedWeights::factors_upload(const Part& p, DType dtype,
                                                                   Pool pool) {
  PartFactors out;
  const bool host = backend_->memory_is_host();
  auto place = [&](const HostTensor& t) -> Result<TensorRef> {
    if (host) return t.ref();
    HR_ASSIGN_OR_RETURN(DeviceBuffer b, allocator_->allocate(t.bytes(), pool, "LoRA factors"));
    HR_TRY(backend_->copy_h2d(b.data(), t.data(), t.bytes(), nullptr));
    TensorRef r{t.desc(), b.data()};
    out.buffers.push_back(std::move(b));
    return r;
  };
  if (fused_here(p, dtype)) {
    out.fused_host = patches_fuse(*p.patches, p.stored, dtype);
    for (const FusedLowRank& f : out.fused_host) {
      FusedOnDevice d{{}, {}, f.row_offset, f.rows};
      HR_ASSIGN_OR_RETURN(d.up, place(f.up));
      HR_ASSIGN_OR_RETURN(d.down_t, place(f.down_t));
      out.fused.push_back(d);
    }
    return out;
  }
  out.multipliers.resize(p.patches->size());
  for (size_t i = 0; i < p.patches->size(); ++i) {
    const WeightPatch& w = (*p.patches)[i];
    PatchFactorsOnDevice d;
    for (const HostTensor& f : w.factors) {
      HR_ASSIGN_OR_RETURN(TensorRef r, place(f));
      d.factors.push_back(r);
    }
    if (!w.dora_scale.empty()) {
      HR_ASSIGN_OR_RETURN(out.multipliers[i], multiplier_of(p, i));
      HR_ASSIGN_OR_RETURN(d.multiplier, place(out.multipliers[i]));
    }
    out.dev.push_back(std::move(d));
  }
  return out;
}

std::pair<int64_t, size_t> PatchedWeights::part_needs(const Part& p, const PartFactors& f,
                                                      DType dtype) const {
  if (!p.patches) return {0, 0};
  if (f.fused.empty())
    return {p.stored.numel(), patch_workspace_bytes(*backend_, *p.patches)};
  size_t ws = 0;
  for (const FusedOnDevice& d : f.fused)
    ws = std::max(ws, fused_workspace_bytes(*backend_, d, p.stored, dtype));
  return {fused_copy_elems(p.stored, dtype), ws};
}

Status PatchedWeights::scratch_ensure(int64_t elems, size_t workspace) {
  const size_t bytes = size_t(elems) * 3 * sizeof(float);
  if (bytes > 0 && scratch_.size() < bytes) {
    scratch_.reset();
    HR_ASSIGN_OR_RETURN(scratch_, allocator_->allocate(bytes, Pool::ACTIVATIONS,
                                                       "LoRA patch scratch"));
  }
  if (workspace > 0 && workspace_.size() < workspace) {
    workspace_.reset();
    HR_ASSIGN_OR_RETURN(workspace_, allocator_->allocate(workspace, Pool::ACTIVATIONS,
                                                         "LoRA patch workspace"));
  }
  return Status();
}

Status PatchedWeights::parts_issue(const std::vector<Part>& parts,
                                   const std::vector<PartFactors>& factors, void* dst,
                                   const void* src, Stream* s) {
  float* scratch = static_cast<float*>(scratch_.data());
  const size_t elems = scratch_.size() / (3 * sizeof(float));
  const PatchScratch sc{scratch, scratch + elems, scratch + 2 * elems, workspace_.data()};
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    char* to = static_cast<char*>(dst) + p.byte_offset;
    const char* from = static_cast<const char*>(src) + p.byte_offset;
    const DType dtype = base_->find(p.name)->dtype();
    if (!p.patches) {
      if (to != from)
        HR_TRY(backend_->copy_d2d(to, from, size_t(p.stored.numel()) * dtype_size(dtype), s));
      continue;
    }
    const size_t bytes = size_t(p.stored.numel()) * dtype_size(dtype);
    if (!factors[i].fused.empty() && to == from) {  // in the ring: Note [fused in place]
      HR_TRY(backend_->copy_d2d(scratch, from, bytes, s));
      from = reinterpret_cast<const char*>(scratch);
    } else if (!factors[i].fused.empty()) {  // rows no group covers are the original's
      HR_TRY(backend_->copy_d2d(to, from, bytes, s));
    }
    const PatchTarget t{to, from, dtype, p.stored, p.ohwi};
    const Status st =
        factors[i].fused.empty()
            ? patches_issue(*backend_, s, t, *p.patches, factors[i].dev, sc)
            : fused_issue(*backend_, s, t, factors[i].fused, workspace_.data(), workspace_.size());
    HR_TRY(st.with_context("patching weight '" + p.name + "'"));
  }
  return Status();
}

// Note [patched weights]: the ops are issued and not waited for; the factors they read wait in
// pending_ (until run_end, or a wait every kPendingMost bytes). Under a budget the original's
// device copy goes once the patched one is made: the residency plan counted each weight once.
// Without one it stays, and another LoRA set on the same model patches from device memory.
// Note [fp8 patches] in memory/fp8_patch.cpp: part `p` (an fp8 weight) patched on the host.
Result<HostTensor> PatchedWeights::fp8_host_patch(const Part& p) const {
  const WeightStorage* st = base_->storage_of(p.name);
  const HostTensor* scale = st && !st->scale.empty() ? base_->find(st->scale) : nullptr;
  if (st && !st->scale.empty() && (!scale || scale->dtype() != DType::F32))
    return make_error(ErrorCode::INTERNAL, "the scale '{}' of '{}' is not a float32 weight",
                      st->scale, p.name);
  HR_ASSIGN_OR_RETURN(HostTensor q, fp8_patched_host(*base_->find(p.name), scale, *p.patches,
                                                     patches_->comfy_prefix + p.name));
  if (!p.ohwi) return q;
  return weight_relayout(q, WeightLayout::CONV_OHWI);  // a channels-last filter (passes.h)
}

// Whether a weight of these parts in `dtype` is patched on the host (Note [fp8 patches]).
bool PatchedWeights::fp8_host_form(const std::vector<Part>& parts, DType dtype) {
  return dtype_is_fp8(dtype) &&
         std::any_of(parts.begin(), parts.end(), [](const Part& p) { return p.patches; });
}

// An fp8 weight's patched host copy: one part patched, or a stack of fp8 parts (Note [stacked
// fp8 projections] in graph/pass_stack.cpp) whose patched parts are each patched as they would
// be alone (their own keys seed the rounding) and whose others are the stored bytes, side by
// side, so that a stacked weight holds its parts' patched bytes exactly.
Result<HostTensor> PatchedWeights::fp8_host_patch(const std::vector<Part>& parts) const {
  if (parts.size() == 1) return fp8_host_patch(parts[0]);
  std::vector<HostTensor> patched(parts.size());
  std::vector<const HostTensor*> stack;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].ohwi)
      return make_error(ErrorCode::INTERNAL, "stacked weight part '{}' is a filter", parts[i].name);
    if (parts[i].patches) {
      HR_ASSIGN_OR_RETURN(patched[i], fp8_host_patch(parts[i]));
      stack.push_back(&patched[i]);
    } else {
      stack.push_back(base_->find(parts[i].name));
    }
  }
  bool placeholders = false;
  for (const HostTensor* t : stack) placeholders = placeholders || t->is_placeholder();
  if (placeholders) {  // a plan run (Note [plan run])
    std::vector<TensorDesc> descs;
    for (const HostTensor* t : stack) descs.push_back(t->desc());
    HR_ASSIGN_OR_RETURN(TensorDesc d, weight_stack_desc(descs));
    return HostTensor::placeholder(d);
  }
  return weight_stack(stack);
}

// The same, uploaded: a resident fp8 weight's patched copy.
Result<DeviceBuffer> PatchedWeights::fp8_patched(const std::vector<Part>& parts,
                                                 const std::string& key) {
  HR_ASSIGN_OR_RETURN(HostTensor q, fp8_host_patch(parts));
  HR_ASSIGN_OR_RETURN(DeviceBuffer dst, allocator_->allocate(q.bytes(), Pool::WEIGHTS,
                                                             "weight " + key + " (patched)"));
  if (!q.is_placeholder()) {
    HR_TRY(backend_->copy_h2d(dst.data(), q.data(), q.bytes(), nullptr));
    HR_TRY(backend_->stream_sync(nullptr));  // q goes now
  }
  return dst;
}

Result<TensorRef> PatchedWeights::patch_resident(const std::string& name, const TensorDesc& desc,
                                                 WeightLayout layout, const std::string& key) {
  HR_ASSIGN_OR_RETURN(std::vector<Part> parts, parts_of(name, desc, layout));
  if (fp8_host_form(parts, desc.dtype)) {
    HR_ASSIGN_OR_RETURN(DeviceBuffer dst, fp8_patched(parts, key));
    if (allocator_->budget() != Allocator::kUnlimited) base_->weight_evict(name, layout);
    ++made_;
    auto it = device_.emplace(key, DeviceCopy{std::move(dst), 0}).first;
    it->second.last_use = allocator_->tick();
    return TensorRef{desc, it->second.buffer.data()};
  }
  HR_ASSIGN_OR_RETURN(TensorRef src, base_->weight_get(name, desc, layout));
  HR_ASSIGN_OR_RETURN(DeviceBuffer dst, allocator_->allocate(desc.bytes(), Pool::WEIGHTS,
                                                             "weight " + key + " (patched)"));
  std::vector<PartFactors> factors(parts.size());
  int64_t elems = 0;
  size_t workspace = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].patches) continue;
    HR_ASSIGN_OR_RETURN(factors[i], factors_upload(parts[i], desc.dtype, Pool::OTHER));
    const auto [e, w] = part_needs(parts[i], factors[i], desc.dtype);
    if (factors[i].fused.empty()) elems = std::max(elems, e);  // fused: no copy (src != dst)
    workspace = std::max(workspace, w);
  }
  HR_TRY(scratch_ensure(elems, workspace));
  HR_TRY(parts_issue(parts, factors, dst.data(), src.data, nullptr));
  for (PartFactors& f : factors) {
    for (const DeviceBuffer& b : f.buffers) pending_bytes_ += b.size();
    pending_.push_back(std::move(f));
  }
  if (pending_bytes_ > kPendingMost) pending_release();  // bounded transient memory
  if (allocator_->budget() != Allocator::kUnlimited)
    base_->weight_evict(name, layout);  // (the free is ordered after the ops on the stream)
  ++made_;
  auto it = device_.emplace(key, DeviceCopy{std::move(dst), 0}).first;
  it->second.last_use = allocator_->tick();
  return TensorRef{desc, it->second.buffer.data()};
}

void PatchedWeights::pending_release() {
  if (pending_.empty()) return;
  if (backend_) (void)backend_->stream_sync(nullptr);
  pending_.clear();
  pending_bytes_ = 0;
  if (streamed_.empty()) {  // the scratch is the streamed weights' too while they exist
    scratch_.reset();
    workspace_.reset();
  }
}

Result<TensorRef> PatchedWeights::weight_get(const std::string& name, const TensorDesc& desc,
                                             WeightLayout layout) {
  if (!weight_patched(name, layout)) return base_->weight_get(name, desc, layout);
  if (!allocator_ || !backend_)
    return make_error(ErrorCode::INTERNAL, "patched weights '{}' served before bind", name);
  const InUseScope in_use(in_use_);  // reclaim must not ask this view while it allocates
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = weight_key(name, layout);
  auto it = device_.find(key);
  if (it == device_.end()) return patch_resident(name, desc, layout, key);
  it->second.last_use = allocator_->tick();
  return TensorRef{desc, it->second.buffer.data()};
}

Result<TensorRef> PatchedWeights::weight_host(const std::string& name, const TensorDesc& desc,
                                              WeightLayout layout) {
  HR_ASSIGN_OR_RETURN(std::vector<TensorRef> r,
                      weight_host_all({WeightRequest{name, desc, layout}}, 1));
  return r.front();
}

Status PatchedWeights::stream_prepare(const WeightRequest& q) {
  const std::string key = weight_key(q.name, q.layout);
  if (streamed_.count(key)) return Status();
  Streamed st;
  HR_ASSIGN_OR_RETURN(st.parts, parts_of(q.name, q.desc, q.layout));
  st.factors.resize(st.parts.size());
  if (fp8_host_form(st.parts, q.desc.dtype)) return fp8_stream_prepare(key, st.parts);
  int64_t elems = 0;
  size_t workspace = 0;
  for (size_t i = 0; i < st.parts.size(); ++i) {
    if (!st.parts[i].patches) continue;
    HR_ASSIGN_OR_RETURN(st.factors[i], factors_upload(st.parts[i], q.desc.dtype, Pool::WEIGHTS));
    const auto [e, w] = part_needs(st.parts[i], st.factors[i], q.desc.dtype);
    elems = std::max(elems, e);
    workspace = std::max(workspace, w);
  }
  HR_TRY(scratch_ensure(elems, workspace));
  streamed_.emplace(key, std::move(st));
  return Status();
}

// Note [fp8 patches] in memory/fp8_patch.cpp: a streamed fp8 weight is patched once on the host
// and streams from that copy (its bytes are the host memory a LoRA on a streamed fp8 model costs).
Status PatchedWeights::fp8_stream_prepare(const std::string& key, const std::vector<Part>& parts) {
  if (fp8_host_.count(key)) return Status();
  HR_ASSIGN_OR_RETURN(HostTensor q, fp8_host_patch(parts));
  fp8_host_.emplace(key, std::move(q));
  return Status();
}

Result<std::vector<TensorRef>> PatchedWeights::weight_host_all(
    const std::vector<WeightRequest>& requests, size_t align) {
  {
    const InUseScope in_use(in_use_);
    std::lock_guard<std::mutex> lock(mu_);
    for (const WeightRequest& q : requests)
      if (weight_patched(q.name, q.layout) && allocator_ && backend_)
        HR_TRY(stream_prepare(q).with_context("preparing the LoRA patches of '" + q.name + "'"));
  }
  HR_ASSIGN_OR_RETURN(std::vector<TensorRef> refs, base_->weight_host_all(requests, align));
  std::lock_guard<std::mutex> lock(mu_);  // fp8 weights stream their patched host copies
  for (size_t i = 0; i < requests.size(); ++i)
    if (auto it = fp8_host_.find(weight_key(requests[i].name, requests[i].layout));
        it != fp8_host_.end())
      refs[i].data = it->second.data();
  return refs;
}

Status PatchedWeights::weight_patch_streamed(const WeightRequest& q, void* device, Stream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fp8_host_.count(weight_key(q.name, q.layout))) return Status();  // patched on the host
  auto it = streamed_.find(weight_key(q.name, q.layout));
  if (it == streamed_.end())
    return make_error(ErrorCode::INTERNAL, "streamed weight '{}' was not prepared", q.name);
  ++streamed_made_;
  return parts_issue(it->second.parts, it->second.factors, device, device, s);
}

// Note [stream extra cache]: the executor asks this at every run's residency decision, for every
// weight of the graph. Deciding the form reads every element of the down factors (whether they
// are exact in the weight's dtype) and asks the backend for GEMM workspaces: on SDXL with a
// rank-64 LoRA ~90 ms of host time per step, measured on the H200 as a streamed step 2.6x the
// one without. The answer for a (weight, dtype, layout) never changes while the view is bound,
// so it is worked out once (bind and allocator_gone forget it).
PatchedWeights::StreamExtra PatchedWeights::stream_extra_of(const WeightRequest& q) const {
  const std::string key = weight_key(q.name, q.layout) + "|" + dtype_name(q.desc.dtype);
  if (auto it = extra_.find(key); it != extra_.end()) return it->second;
  StreamExtra e;
  const bool device = backend_ && !backend_->memory_is_host();
  const bool stack = q.layout == WeightLayout::STACK;
  for (const std::string& n : stack ? weight_stack_parts(q.name) : std::vector{q.name}) {
    const std::vector<WeightPatch>* ps = patches_->find(n);
    const HostTensor* h = ps ? base_->find(n) : nullptr;
    if (!h || dtype_is_fp8(h->dtype())) continue;  // fp8: patched on the host (Note [fp8 patches])
    const bool ohwi = q.layout == WeightLayout::CONV_OHWI;
    if (device && patches_fusable(*ps, q.desc.dtype, ohwi)) {  // Note [fused low-rank patches]
      e.factors += fused_bytes(*ps, q.desc.dtype);
      e.workspace = std::max(e.workspace,
                             fused_workspace_most(*backend_, *ps, h->shape(), q.desc.dtype));
      e.elems = std::max(e.elems, fused_copy_elems(h->shape(), q.desc.dtype));
      continue;
    }
    for (const WeightPatch& p : *ps) e.factors += p.factor_bytes();
    e.elems = std::max(e.elems, h->numel());
    if (backend_) e.workspace = std::max(e.workspace, patch_workspace_bytes(*backend_, *ps));
  }
  extra_.emplace(key, e);
  return e;
}

// Note [resident patch room]: a resident weight is patched once, in the run that first uses it,
// into a new block made before its original goes, with its factors uploaded beside it and kept
// until the run ends or kPendingMost bytes wait, and the scratch and workspace of the largest
// such weight. None of that is the arena's or the weights', so the residency plan leaves it out
// of the weights' room with the streamed weights' factors. A form that reserved nothing for a
// plan that streamed nothing ran a tiny UNet with a LoRA stack out of memory on the H200: its
// patch scratch and cuBLAS workspace were 8 MiB beside an all-resident plan. Weights already
// patched on the device need nothing.
uint64_t PatchedWeights::patch_room_bytes(const std::vector<WeightRequest>& streamed,
                                          const std::vector<WeightRequest>& resident) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t factors = 0, pending = 0, pending_largest = 0, copy = 0;
  int64_t elems = 0;
  size_t workspace = 0;
  const auto needs = [&](const StreamExtra& e) {
    elems = std::max(elems, e.elems);
    workspace = std::max(workspace, e.workspace);
  };
  for (const WeightRequest& q : streamed) {
    const StreamExtra e = stream_extra_of(q);
    factors += e.factors;
    needs(e);
  }
  for (const WeightRequest& q : resident) {
    if (!weight_patched(q.name, q.layout) || device_.count(weight_key(q.name, q.layout))) continue;
    const StreamExtra e = stream_extra_of(q);
    pending += e.factors;
    pending_largest = std::max(pending_largest, e.factors);
    copy = std::max<uint64_t>(copy, align_up(q.desc.bytes()));
    needs(e);
  }
  pending = std::min(pending, kPendingMost + pending_largest);
  return factors + pending + copy + uint64_t(elems) * 3 * sizeof(float) + workspace;
}

void PatchedWeights::patch_signature(std::vector<const void*>& sig) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [k, t] : fp8_host_) sig.push_back(t.data());  // std::map: in key order
  if (streamed_.empty()) return;
  sig.push_back(scratch_.data());
  sig.push_back(workspace_.data());
  std::vector<std::pair<std::string, const void*>> bufs;
  for (const auto& [k, st] : streamed_)
    for (const PartFactors& f : st.factors)
      for (const DeviceBuffer& b : f.buffers) bufs.push_back({k, b.data()});
  std::sort(bufs.begin(), bufs.end());
  for (const auto& b : bufs) sig.push_back(b.second);
}

void PatchedWeights::weight_evict(const std::string& name, WeightLayout layout) {
  base_->weight_evict(name, layout);
  std::lock_guard<std::mutex> lock(mu_);
  device_.erase(weight_key(name, layout));
}

uint64_t PatchedWeights::streaming_bytes() const {
  uint64_t n = scratch_.size() + workspace_.size();
  for (const auto& [k, st] : streamed_)
    for (const PartFactors& f : st.factors)
      for (const DeviceBuffer& b : f.buffers) n += b.size();
  return n;
}

uint64_t PatchedWeights::own_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_copies_bytes(device_) + streaming_bytes();
}

std::string PatchedWeights::patch_describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fmt::format("LoRA patches on {} weights (factors {} on the host): {} resident patched "
                     "copies made on the device, {} streamed weights patched in the ring after "
                     "their copy",
                     patches_->by_weight.size(), bytes_format(patches_->factor_bytes()),
                     made_.load(), streamed_.size());
}

uint64_t PatchedWeights::patch_device_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streaming_bytes();
}

uint64_t PatchedWeights::resident_bytes() const { return base_->device_bytes() + own_bytes(); }

void PatchedWeights::run_begin() {
  ++in_use_;
  base_->run_begin();
  if (allocator_) last_use_ = allocator_->tick();
}

void PatchedWeights::run_end() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_release();
  }
  if (allocator_) last_use_ = allocator_->tick();
  base_->run_end();
  if (--in_use_ == 0 && allocator_) allocator_->trim_weights();
}

uint64_t PatchedWeights::reclaim(uint64_t bytes) {
  if (in_use()) return 0;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || in_use()) return 0;
  uint64_t freed = device_copies_evict(device_, bytes);  // Note [eviction policy]
  if (freed < bytes) {  // the streaming factors and scratch: made again by the next streamed run
    freed += streaming_bytes();
    streamed_.clear();
    scratch_.reset();
    workspace_.reset();
  }
  return freed;
}

uint64_t PatchedWeights::reclaim_block(uint64_t bytes) {
  if (in_use()) return 0;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || in_use()) return 0;
  return device_copies_evict_block(device_, bytes);  // Note [eviction policy]
}

}  // namespace hr
