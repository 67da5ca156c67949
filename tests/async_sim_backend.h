// AsyncSimBackend: a Backend for tests that wraps the CPU backend and simulates asynchronous
// streams adversarially (Note [simulated streams]), so that code using several streams shows
// a missing event wait as a wrong result under some scheduling order.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace hr {

// Note [simulated streams]
// CUDA runs the streams of a device concurrently; work is ordered only within a stream and
// through events. AsyncSimBackend models that with one FIFO queue of items per stream:
// - op_run, copy_h2d/d2h/d2d and memset_zero append a WORK item holding copies of their
//   arguments (an op's input list and params are copied, as a kernel launch copies them). The
//   memory the pointers name is read and written only when the item runs, so a copy_h2d reads
//   its source late (as from pinned memory) and copy_d2h results appear only after a sync.
//   Nothing runs at enqueue time.
// - event_record appends a RECORD item bound to a fresh mark and points the event at that mark
//   (recording again re-arms the event). The mark completes when the RECORD item runs, i.e.
//   when every earlier item of its stream has run.
// - stream_wait_event appends a WAIT item bound to the mark the event points at WHEN WAIT IS
//   CALLED; the items behind it stay queued until that mark completes. Waiting on an event
//   that was never recorded is a no-op.
// - Work runs only when the host synchronises: stream_sync, event_sync, drain(), and the
//   implicit device-wide sync of device_free/host_free_pinned (cudaFree synchronises too).
//   The scheduler then repeatedly picks a stream whose front item is ready (not a WAIT on an
//   incomplete mark) and runs that one item, until the sync's condition holds. The SimOrder
//   picks the stream: COPIES_EARLY prefers the non-default streams (a copy that overwrites a
//   staging slot still being read runs first), COPIES_LATE prefers the default stream
//   (compute that reads a slot before its copy ran goes first), ROUND_ROBIN rotates one item
//   at a time, RANDOM draws among the ready streams from a seeded generator.
// - A wait can only name a mark already enqueued, so these streams cannot deadlock through the
//   API; should no front be ready while the sync's condition fails, the sync reports INTERNAL
//   with the streams' fronts instead of hanging.
// - A failing item (an op error) is reported by the sync that ran it, or by the next explicit
//   sync when an implicit one ran it, like CUDA's deferred kernel errors.
// - Memory, ops' support and workspaces delegate to the CPU backend; no capture, no timing.
enum class SimOrder { COPIES_EARLY, COPIES_LATE, ROUND_ROBIN, RANDOM };

namespace sim_detail {

struct Mark {
  bool done = false;
};

struct Item {
  enum class Kind : uint8_t { OP, COPY, MEMSET, RECORD, WAIT };
  Kind kind = Kind::OP;
  std::string what;                // for error messages
  std::function<Status()> work;    // OP, COPY, MEMSET
  std::shared_ptr<Mark> mark;      // RECORD, WAIT
  bool is_work() const { return kind == Kind::OP || kind == Kind::COPY || kind == Kind::MEMSET; }
};

struct Queue {
  int id = 0;  // 0 is the default stream
  std::atomic<bool> orphaned{false};  // its Stream handle was destroyed
  std::deque<Item> items;
  uint64_t executed = 0;  // work items run
  size_t max_depth = 0;
  bool ready() const {
    if (items.empty()) return false;
    return items.front().kind != Item::Kind::WAIT || items.front().mark->done;
  }
};

class SimStream final : public Stream {
 public:
  explicit SimStream(std::shared_ptr<Queue> q) : queue(std::move(q)) {}
  ~SimStream() override { queue->orphaned = true; }  // its pending work still runs
  std::shared_ptr<Queue> queue;
};

class SimEvent final : public Event {
 public:
  std::shared_ptr<Mark> last;  // the most recent record; null when never recorded
};

}  // namespace sim_detail

class AsyncSimBackend final : public Backend {
 public:
  explicit AsyncSimBackend(SimOrder order, uint64_t seed = 1)
      : cpu_(cpu_backend_create(1)), order_(order), rng_(seed) {
    default_ = std::make_unique<sim_detail::SimStream>(new_queue());
  }
  ~AsyncSimBackend() override {
    std::lock_guard<std::mutex> lock(mu_);
    queues_.clear();  // unsynchronised work is dropped, never run against freed memory
  }

  // --- test controls and counters ---
  // True: every property of Note [device properties] (backend/device.h) answers as a discrete
  // GPU's (device memory not host memory, CUDA's generator, stacked weights), so that weights
  // are uploaded and streamed and nodes draw CUDA's noise; device memory stays host memory and
  // the kernels stay the CPU's. Tests of streaming code set it.
  void set_discrete(bool discrete) { discrete_ = discrete; }
  // A GPU's habits the CPU lacks: convolutions preferred channels-last, and GEMM/convolution
  // workspaces (the CPU kernels ask for none; cuBLASLt and cuDNN do).
  void set_channels_last(bool on) { channels_last_ = on; }
  void set_workspace_pad(size_t bytes) { workspace_pad_ = bytes; }
  SimOrder order() const { return order_; }
  // Runs every stream until all queues are empty.
  Status drain() {
    std::lock_guard<std::mutex> lock(mu_);
    return finish(run_until([&] { return all_empty(); }, "drain"));
  }
  uint64_t executed(Stream* s) const {  // work items (ops, copies, memsets) run on s
    std::lock_guard<std::mutex> lock(mu_);
    const sim_detail::Queue* q = queue_of(s);
    return q ? q->executed : 0;
  }
  size_t max_queue_depth(Stream* s) const {
    std::lock_guard<std::mutex> lock(mu_);
    const sim_detail::Queue* q = queue_of(s);
    return q ? q->max_depth : 0;
  }
  size_t max_queue_depth() const {  // over all streams, markers and waits included
    std::lock_guard<std::mutex> lock(mu_);
    return max_depth_;
  }
  size_t pending() const {  // items queued on all streams
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& q : queues_) n += q->items.size();
    return n;
  }
  uint64_t copies() const { return locked_read(copies_); }   // copy items run
  uint64_t ops() const { return locked_read(ops_); }         // op_run items run
  uint64_t memsets() const { return locked_read(memsets_); }

  // --- Backend: delegated ---
  DeviceInfo info() const override { return cpu_->info(); }
  bool memory_is_host() const override { return !discrete_; }
  TorchGenerator torch_generator() const override {
    return discrete_ ? TorchGenerator::CUDA_PHILOX : TorchGenerator::CPU_MT19937;
  }
  Result<void*> device_alloc(size_t bytes) override { return cpu_->device_alloc(bytes); }
  Status device_sync() override {
    implicit_sync("device_sync");
    return Status();
  }
  void device_free(void* p) override {
    implicit_sync("device_free");
    cpu_->device_free(p);
  }
  Result<void*> host_alloc_pinned(size_t bytes) override { return cpu_->host_alloc_pinned(bytes); }
  void host_free_pinned(void* p) override {
    implicit_sync("host_free_pinned");
    cpu_->host_free_pinned(p);
  }
  bool op_supported(OpKind kind, DType dtype) const override {
    return cpu_->op_supported(kind, dtype);
  }
  bool prefers_channels_last(DType dtype) const override {
    return channels_last_ || cpu_->prefers_channels_last(dtype);
  }
  bool prefers_stacked_weights() const override { return discrete_; }
  size_t op_workspace(OpKind kind, const OpParams& params, std::span<const TensorDesc> inputs,
                      const TensorDesc& output) const override {
    const size_t w = cpu_->op_workspace(kind, params, inputs, output);
    return kind == OpKind::LINEAR || kind == OpKind::CONV2D ? w + workspace_pad_ : w;
  }
  bool capture_supported() const override { return false; }

  // --- Backend: streams and events ---
  Stream* default_stream() override { return default_.get(); }
  Result<std::unique_ptr<Stream>> stream_create() override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::unique_ptr<Stream>(new sim_detail::SimStream(new_queue()));
  }
  Result<std::unique_ptr<Event>> event_create() override {
    return std::unique_ptr<Event>(new sim_detail::SimEvent());
  }
  Status stream_sync(Stream* s) override {
    std::lock_guard<std::mutex> lock(mu_);
    sim_detail::Queue* q = queue_of(s);
    if (!q) return foreign("stream_sync");
    return finish(run_until([q] { return q->items.empty(); }, "stream_sync"));
  }
  Status event_sync(Event* e) override {
    auto* ev = dynamic_cast<sim_detail::SimEvent*>(e);
    if (!ev) return foreign("event_sync");
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<sim_detail::Mark> m = ev->last;  // the record current at this call
    if (!m) return finish(Status());
    return finish(run_until([&m] { return m->done; }, "event_sync"));
  }
  Status event_record(Event* e, Stream* s) override {
    auto* ev = dynamic_cast<sim_detail::SimEvent*>(e);
    if (!ev) return foreign("event_record");
    auto mark = std::make_shared<sim_detail::Mark>();
    sim_detail::Item item{sim_detail::Item::Kind::RECORD, "event_record", {}, mark};
    std::lock_guard<std::mutex> lock(mu_);
    HR_TRY(enqueue(s, std::move(item)));
    ev->last = std::move(mark);  // re-arms: later waits refer to this record
    return Status();
  }
  Status stream_wait_event(Stream* s, Event* e) override {
    auto* ev = dynamic_cast<sim_detail::SimEvent*>(e);
    if (!ev) return foreign("stream_wait_event");
    std::lock_guard<std::mutex> lock(mu_);
    if (!ev->last) return Status();  // never recorded: nothing to wait for (CUDA)
    return enqueue(s, {sim_detail::Item::Kind::WAIT, "stream_wait_event", {}, ev->last});
  }

  // --- Backend: work ---
  Status copy_h2d(void* d, const void* src, size_t n, Stream* s) override {
    Backend* cpu = cpu_.get();
    return enqueue_work(s, sim_detail::Item::Kind::COPY, fmt::format("copy_h2d {} bytes", n),
                        [=] { return cpu->copy_h2d(d, src, n, nullptr); });
  }
  Status copy_d2h(void* d, const void* src, size_t n, Stream* s) override {
    Backend* cpu = cpu_.get();
    return enqueue_work(s, sim_detail::Item::Kind::COPY, fmt::format("copy_d2h {} bytes", n),
                        [=] { return cpu->copy_d2h(d, src, n, nullptr); });
  }
  Status copy_d2d(void* d, const void* src, size_t n, Stream* s) override {
    Backend* cpu = cpu_.get();
    return enqueue_work(s, sim_detail::Item::Kind::COPY, fmt::format("copy_d2d {} bytes", n),
                        [=] { return cpu->copy_d2d(d, src, n, nullptr); });
  }
  Status memset_zero(void* d, size_t n, Stream* s) override {
    Backend* cpu = cpu_.get();
    return enqueue_work(s, sim_detail::Item::Kind::MEMSET, fmt::format("memset_zero {} bytes", n),
                        [=] { return cpu->memset_zero(d, n, nullptr); });
  }
  Status op_run(const OpCall& call, Stream* s) override {
    Backend* cpu = cpu_.get();
    std::vector<TensorRef> inputs(call.inputs.begin(), call.inputs.end());
    auto params = call.params ? std::make_shared<const OpParams>(*call.params) : nullptr;
    OpCall c = call;
    auto run = [cpu, c, inputs = std::move(inputs), params]() mutable {
      c.inputs = inputs;  // owned by this closure, which lives until the item ran
      c.params = params.get();
      return cpu->op_run(c, nullptr);
    };
    return enqueue_work(s, sim_detail::Item::Kind::OP, op_name(call.kind), std::move(run));
  }

 private:
  using Queue = sim_detail::Queue;
  using Item = sim_detail::Item;

  std::shared_ptr<Queue> new_queue() {  // mu_ held (or in the constructor)
    auto q = std::make_shared<Queue>();
    q->id = next_id_++;
    queues_.push_back(q);
    return q;
  }
  Queue* queue_of(Stream* s) const {
    if (!s) return default_->queue.get();
    auto* ss = dynamic_cast<sim_detail::SimStream*>(s);
    return ss ? ss->queue.get() : nullptr;
  }
  static Status foreign(const char* call) {
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: stream or event does not belong to AsyncSimBackend", call);
  }
  uint64_t locked_read(const uint64_t& v) const {
    std::lock_guard<std::mutex> lock(mu_);
    return v;
  }

  Status enqueue_work(Stream* s, Item::Kind kind, std::string what,
                      std::function<Status()> work) {
    std::lock_guard<std::mutex> lock(mu_);
    return enqueue(s, Item{kind, std::move(what), std::move(work), nullptr});
  }
  Status enqueue(Stream* s, Item item) {  // mu_ held
    Queue* q = queue_of(s);
    if (!q) return foreign(item.what.c_str());
    q->items.push_back(std::move(item));
    q->max_depth = std::max(q->max_depth, q->items.size());
    max_depth_ = std::max(max_depth_, q->items.size());
    return Status();
  }

  // Runs items, one at a time in the order the policy picks, until done() holds.
  template <typename Done>
  Status run_until(Done done, const char* call) {  // mu_ held
    Status st;
    while (st.ok() && !done()) {
      Queue* q = pick();
      if (!q) return deadlock(call);
      st = step(*q);
    }
    prune();
    return st;
  }
  Status step(Queue& q) {
    Item item = std::move(q.items.front());
    q.items.pop_front();
    if (item.kind == Item::Kind::RECORD) item.mark->done = true;
    if (!item.is_work()) return Status();
    ++q.executed;
    if (item.kind == Item::Kind::COPY) ++copies_;
    if (item.kind == Item::Kind::MEMSET) ++memsets_;
    if (item.kind == Item::Kind::OP) ++ops_;
    Status st = item.work();
    if (st.ok()) return st;
    return st.with_context(fmt::format("simulated stream {}: {}", q.id, item.what));
  }

  Queue* pick() {
    std::vector<Queue*> ready;
    for (const auto& q : queues_)
      if (q->ready()) ready.push_back(q.get());
    if (ready.empty()) return nullptr;
    switch (order_) {
      case SimOrder::COPIES_EARLY: return prefer(ready, /*want_default=*/false);
      case SimOrder::COPIES_LATE: return prefer(ready, /*want_default=*/true);
      case SimOrder::ROUND_ROBIN: return next_in_turn(ready);
      case SimOrder::RANDOM: return ready[rng_() % ready.size()];
    }
    return ready.front();
  }
  static Queue* prefer(const std::vector<Queue*>& ready, bool want_default) {
    for (Queue* q : ready)
      if ((q->id == 0) == want_default) return q;
    return ready.front();
  }
  Queue* next_in_turn(const std::vector<Queue*>& ready) {  // ready is in id order
    Queue* chosen = ready.front();
    for (Queue* q : ready)
      if (q->id > last_turn_) {
        chosen = q;
        break;
      }
    last_turn_ = chosen->id;
    return chosen;
  }

  bool all_empty() const {
    for (const auto& q : queues_)
      if (!q->items.empty()) return false;
    return true;
  }
  void prune() {  // drops queues whose handle is gone and whose work has all run
    std::erase_if(queues_, [](const std::shared_ptr<Queue>& q) {
      return q->orphaned && q->items.empty();
    });
  }
  Status deadlock(const char* call) const {
    std::string fronts;
    for (const auto& q : queues_)
      if (!q->items.empty())
        fronts += fmt::format(" [stream {}: {} items, front '{}']", q->id, q->items.size(),
                              q->items.front().what);
    return make_error(ErrorCode::INTERNAL, "{}: simulated streams deadlocked; no front item is "
                      "ready:{}", call, fronts);
  }

  // A failure of this sync, else an error an implicit sync left for the next explicit one.
  Status finish(Status st) {
    if (!st.ok()) return st;
    return std::exchange(deferred_, Status());
  }
  void implicit_sync(const char* call) {
    std::lock_guard<std::mutex> lock(mu_);
    Status st = run_until([&] { return all_empty(); }, call);
    if (!st.ok() && deferred_.ok()) deferred_ = st;
  }

  std::unique_ptr<Backend> cpu_;
  SimOrder order_;
  std::mt19937_64 rng_;
  bool discrete_ = false;
  bool channels_last_ = false;
  size_t workspace_pad_ = 0;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Queue>> queues_;
  std::unique_ptr<sim_detail::SimStream> default_;
  int next_id_ = 0;
  int last_turn_ = -1;
  uint64_t copies_ = 0, ops_ = 0, memsets_ = 0;
  size_t max_depth_ = 0;
  Status deferred_;
};

}  // namespace hr
