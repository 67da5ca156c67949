// Tests for AsyncSimBackend (tests/async_sim_backend.h): the CUDA stream semantics it simulates
// (Note [simulated streams]), and that it exposes the two races of a weight-staging program
// (a copy stream fills a ring of slots that compute on the default stream reads): a missing
// "copy done" wait under COPIES_LATE and a missing "slot is free" wait under COPIES_EARLY.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "async_sim_backend.h"
#include "backend/allocator.h"

namespace hr {
namespace {

constexpr int64_t kN = 4;
constexpr size_t kBytes = kN * sizeof(float);
using Vec = std::vector<float>;

struct Order {
  SimOrder order;
  uint64_t seed;
  std::string name;
};

std::vector<Order> every_order() {
  std::vector<Order> v = {{SimOrder::COPIES_EARLY, 1, "copies_early"},
                          {SimOrder::COPIES_LATE, 1, "copies_late"},
                          {SimOrder::ROUND_ROBIN, 1, "round_robin"}};
  for (uint64_t seed = 1; seed <= 16; ++seed)
    v.push_back({SimOrder::RANDOM, seed, "random_" + std::to_string(seed)});
  return v;
}

TensorRef ref(float* p) { return TensorRef{TensorDesc{DType::F32, Shape{kN}}, p}; }

// Device buffers of kN floats, freed at scope exit (device_free syncs, like cudaFree).
class Buffers {
 public:
  explicit Buffers(Backend& b) : b_(b) {}
  ~Buffers() {
    for (void* p : ptrs_) b_.device_free(p);
  }
  float* alloc() {
    Result<void*> r = b_.device_alloc(kBytes);
    EXPECT_TRUE(r.ok()) << r.status().str();
    ptrs_.push_back(r.ok() ? *r : nullptr);
    return static_cast<float*>(ptrs_.back());
  }

 private:
  Backend& b_;
  std::vector<void*> ptrs_;
};

std::unique_ptr<Stream> make_stream(Backend& b) {
  Result<std::unique_ptr<Stream>> s = b.stream_create();
  EXPECT_TRUE(s.ok()) << s.status().str();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::unique_ptr<Event> make_event(Backend& b) {
  Result<std::unique_ptr<Event>> e = b.event_create();
  EXPECT_TRUE(e.ok()) << e.status().str();
  return e.ok() ? std::move(e).value() : nullptr;
}

// out = a * w on stream s. The input array and params die here: the backend must copy them.
Status mul(Backend& b, float* a, float* w, float* out, Stream* s) {
  const TensorRef in[2] = {ref(a), ref(w)};
  OpParams params;
  OpCall c;
  c.kind = OpKind::MUL;
  c.params = &params;
  c.inputs = in;
  c.output = ref(out);
  return b.op_run(c, s);
}

// Reads a device buffer back through the default stream.
Result<Vec> read_back(Backend& b, const float* p) {
  Vec host(kN, -1.0f);
  HR_TRY(b.copy_d2h(host.data(), p, kBytes, nullptr));
  HR_TRY(b.stream_sync(nullptr));
  return host;
}

Vec times(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] *= b[i];
  return a;
}

// --- the weight-staging program -----------------------------------------------------------

struct RingOptions {
  int layers = 5;
  int slots = 2;
  bool wait_copied = true;  // compute waits until its slot's copy ran
  bool wait_freed = true;   // a copy waits until the previous reader of its slot ran
};

Vec ring_input() { return {1.0f, 2.0f, 3.0f, 4.0f}; }
Vec ring_weight(int layer) {
  Vec w(kN);
  for (int64_t j = 0; j < kN; ++j) w[j] = float(2 + (layer + j) % 3);
  return w;
}
Vec ring_expected(int layers) {
  Vec x = ring_input();
  for (int i = 0; i < layers; ++i) x = times(x, ring_weight(i));
  return x;
}

// x <- x * w_i for every layer i, the weights streamed through `slots` staging buffers on a
// copy stream, `slots` layers ahead of compute on the default stream: the issue order of a
// weight-streaming executor. Each slot's events are re-recorded on every reuse, so compute i
// must wait on copy i's record, not on the later one of copy i+slots (a wait snapshots the
// record current at the call: otherwise the program deadlocks).
Result<Vec> run_ring(AsyncSimBackend& b, const RingOptions& o) {
  std::vector<Vec> weights;
  for (int i = 0; i < o.layers; ++i) weights.push_back(ring_weight(i));
  const Vec x0 = ring_input();
  Buffers buf(b);
  float* x[2] = {buf.alloc(), buf.alloc()};
  std::vector<float*> slot;
  std::vector<std::unique_ptr<Event>> copied, freed;
  for (int k = 0; k < o.slots; ++k) {
    slot.push_back(buf.alloc());
    copied.push_back(make_event(b));
    freed.push_back(make_event(b));
    HR_TRY(b.memset_zero(slot.back(), kBytes, nullptr));
  }
  HR_TRY(b.stream_sync(nullptr));  // slots start zeroed: a missed copy shows as zeros
  std::unique_ptr<Stream> cs = make_stream(b);

  auto copy = [&](int i) -> Status {
    const int k = i % o.slots;
    if (i >= o.slots && o.wait_freed) HR_TRY(b.stream_wait_event(cs.get(), freed[k].get()));
    HR_TRY(b.copy_h2d(slot[k], weights[i].data(), kBytes, cs.get()));
    return b.event_record(copied[k].get(), cs.get());
  };
  HR_TRY(b.copy_h2d(x[0], x0.data(), kBytes, nullptr));
  for (int i = 0; i < o.layers && i < o.slots; ++i) HR_TRY(copy(i));
  for (int i = 0; i < o.layers; ++i) {
    const int k = i % o.slots;
    if (o.wait_copied) HR_TRY(b.stream_wait_event(nullptr, copied[k].get()));
    HR_TRY(mul(b, x[i % 2], slot[k], x[(i + 1) % 2], nullptr));
    HR_TRY(b.event_record(freed[k].get(), nullptr));
    if (i + o.slots < o.layers) HR_TRY(copy(i + o.slots));
  }
  HR_ASSIGN_OR_RETURN(Vec out, read_back(b, x[o.layers % 2]));
  HR_TRY(b.drain());  // the copy stream may still hold work reading `weights`
  return out;
}

TEST(AsyncSimRing, CorrectWithEveryWaitUnderEveryOrder) {
  for (const Order& ord : every_order()) {
    for (int slots : {1, 2, 3}) {
      SCOPED_TRACE(ord.name + ", slots " + std::to_string(slots));
      AsyncSimBackend b(ord.order, ord.seed);
      Result<Vec> out = run_ring(b, RingOptions{5, slots, true, true});
      ASSERT_TRUE(out.ok()) << out.status().str();
      EXPECT_EQ(*out, ring_expected(5));
      EXPECT_EQ(b.copies(), 5u + 2u);  // the weights, the input and the read-back
      EXPECT_EQ(b.ops(), 5u);
      EXPECT_EQ(b.pending(), 0u);
    }
  }
}

TEST(AsyncSimRing, MissingCopyDoneWaitIsWrongUnderCopiesLate) {
  RingOptions o{5, 2, /*wait_copied=*/false, true};
  AsyncSimBackend late(SimOrder::COPIES_LATE);
  Result<Vec> out = run_ring(late, o);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_NE(*out, ring_expected(5));
  EXPECT_EQ(*out, Vec(kN, 0.0f)) << "compute read the zeroed slots before any copy ran";

  AsyncSimBackend early(SimOrder::COPIES_EARLY);  // the race is silent in the other order
  out = run_ring(early, o);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_EQ(*out, ring_expected(5));
}

TEST(AsyncSimRing, MissingSlotFreeWaitIsWrongUnderCopiesEarly) {
  RingOptions o{5, 2, true, /*wait_freed=*/false};
  AsyncSimBackend early(SimOrder::COPIES_EARLY);
  Result<Vec> out = run_ring(early, o);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_NE(*out, ring_expected(5)) << "a copy must overwrite a slot before its reader ran";

  AsyncSimBackend late(SimOrder::COPIES_LATE);
  out = run_ring(late, o);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_EQ(*out, ring_expected(5));
}

TEST(AsyncSimRing, RandomOrdersAlsoExposeBothRaces) {
  for (RingOptions o : {RingOptions{5, 2, false, true}, RingOptions{5, 2, true, false}}) {
    int wrong = 0;
    for (uint64_t seed = 1; seed <= 32; ++seed) {
      AsyncSimBackend b(SimOrder::RANDOM, seed);
      Result<Vec> out = run_ring(b, o);
      ASSERT_TRUE(out.ok()) << out.status().str();
      wrong += *out != ring_expected(5);
    }
    EXPECT_GT(wrong, 0) << "wait_copied " << o.wait_copied << ", wait_freed " << o.wait_freed;
  }
}

// --- the minimal two-stream programs of the brief ----------------------------------------

// Copy w into a slot on a copy stream; y = x * slot on the default stream.
Result<Vec> copy_then_op(AsyncSimBackend& b, bool wait) {
  const Vec x = {1, 2, 3, 4}, w = {5, 6, 7, 8};
  Buffers buf(b);
  float *dx = buf.alloc(), *slot = buf.alloc(), *y = buf.alloc();
  HR_TRY(b.memset_zero(slot, kBytes, nullptr));
  HR_TRY(b.copy_h2d(dx, x.data(), kBytes, nullptr));
  HR_TRY(b.stream_sync(nullptr));
  std::unique_ptr<Stream> cs = make_stream(b);
  std::unique_ptr<Event> copied = make_event(b);
  HR_TRY(b.copy_h2d(slot, w.data(), kBytes, cs.get()));
  HR_TRY(b.event_record(copied.get(), cs.get()));
  if (wait) HR_TRY(b.stream_wait_event(nullptr, copied.get()));
  HR_TRY(mul(b, dx, slot, y, nullptr));
  HR_ASSIGN_OR_RETURN(Vec out, read_back(b, y));
  HR_TRY(b.drain());
  return out;
}

TEST(AsyncSimTwoStreams, CopyThenOpWithWaitIsRightUnderEveryOrder) {
  for (const Order& ord : every_order()) {
    SCOPED_TRACE(ord.name);
    AsyncSimBackend b(ord.order, ord.seed);
    Result<Vec> out = copy_then_op(b, true);
    ASSERT_TRUE(out.ok()) << out.status().str();
    EXPECT_EQ(*out, (Vec{5, 12, 21, 32}));
  }
}

TEST(AsyncSimTwoStreams, CopyThenOpWithoutWaitIsWrongUnderCopiesLate) {
  AsyncSimBackend b(SimOrder::COPIES_LATE);
  Result<Vec> out = copy_then_op(b, false);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_EQ(*out, Vec(kN, 0.0f));
}

// One slot: y0 = x * w0, then the slot is refilled with w1 and y1 = y0 * w1.
Result<Vec> reuse_slot(AsyncSimBackend& b, bool wait_reader) {
  const Vec x = {1, 2, 3, 4}, w0 = {2, 2, 2, 2}, w1 = {3, 3, 3, 3};
  Buffers buf(b);
  float *dx = buf.alloc(), *slot = buf.alloc(), *y0 = buf.alloc(), *y1 = buf.alloc();
  HR_TRY(b.copy_h2d(dx, x.data(), kBytes, nullptr));
  HR_TRY(b.stream_sync(nullptr));
  std::unique_ptr<Stream> cs = make_stream(b);
  std::unique_ptr<Event> copied = make_event(b), read = make_event(b);
  HR_TRY(b.copy_h2d(slot, w0.data(), kBytes, cs.get()));
  HR_TRY(b.event_record(copied.get(), cs.get()));
  HR_TRY(b.stream_wait_event(nullptr, copied.get()));
  HR_TRY(mul(b, dx, slot, y0, nullptr));
  HR_TRY(b.event_record(read.get(), nullptr));
  if (wait_reader) HR_TRY(b.stream_wait_event(cs.get(), read.get()));
  HR_TRY(b.copy_h2d(slot, w1.data(), kBytes, cs.get()));
  HR_TRY(b.event_record(copied.get(), cs.get()));
  HR_TRY(b.stream_wait_event(nullptr, copied.get()));
  HR_TRY(mul(b, y0, slot, y1, nullptr));
  Result<Vec> out = read_back(b, y1);
  HR_TRY(b.drain());
  return out;
}

TEST(AsyncSimTwoStreams, SlotReuseWaitingForReaderIsRightUnderEveryOrder) {
  for (const Order& ord : every_order()) {
    SCOPED_TRACE(ord.name);
    AsyncSimBackend b(ord.order, ord.seed);
    Result<Vec> out = reuse_slot(b, true);
    ASSERT_TRUE(out.ok()) << out.status().str();
    EXPECT_EQ(*out, (Vec{6, 12, 18, 24}));
  }
}

TEST(AsyncSimTwoStreams, SlotReuseWithoutReaderWaitIsWrongUnderCopiesEarly) {
  AsyncSimBackend b(SimOrder::COPIES_EARLY);
  Result<Vec> out = reuse_slot(b, false);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_EQ(*out, (Vec{9, 18, 27, 36})) << "y0 must have read w1, copied over w0 too early";
}

// --- stream and event semantics -----------------------------------------------------------

TEST(AsyncSimSemantics, NothingRunsBeforeASync) {
  AsyncSimBackend b(SimOrder::ROUND_ROBIN);
  Buffers buf(b);
  float* d = buf.alloc();
  ASSERT_TRUE(b.memset_zero(d, kBytes, nullptr).ok());
  ASSERT_TRUE(b.stream_sync(nullptr).ok());
  const Vec src = {1, 2, 3, 4};
  ASSERT_TRUE(b.copy_h2d(d, src.data(), kBytes, nullptr).ok());
  EXPECT_EQ(Vec(d, d + kN), Vec(kN, 0.0f)) << "the copy ran at enqueue";
  EXPECT_EQ(b.pending(), 1u);
  Vec host(kN, -1.0f);
  ASSERT_TRUE(b.copy_d2h(host.data(), d, kBytes, nullptr).ok());
  EXPECT_EQ(host, Vec(kN, -1.0f)) << "copy_d2h is visible only after a sync";
  ASSERT_TRUE(b.stream_sync(nullptr).ok());
  EXPECT_EQ(host, src);
  EXPECT_EQ(b.pending(), 0u);
}

// Note [weight block cache]: a freed weight block whose last reader is still queued is handed to
// the next weight of its size only after a device-wide wait, so the reader sees the old values
// even though the new owner overwrites the block at once (cudaFree used to give this for free).
TEST(AsyncSimSemantics, ReusedWeightBlockWaitsForItsLastReader) {
  AsyncSimBackend b(SimOrder::COPIES_LATE);
  b.set_discrete(true);
  Allocator a(b);
  std::unique_ptr<Stream> s = make_stream(b);
  Result<DeviceBuffer> old = a.allocate(kBytes, Pool::WEIGHTS, "old weight");
  Result<DeviceBuffer> out = a.allocate(kBytes, Pool::ACTIVATIONS, "reader's output");
  ASSERT_TRUE(old.ok() && out.ok());
  const Vec before = {1, 2, 3, 4};
  std::memcpy(old->data(), before.data(), kBytes);
  ASSERT_TRUE(b.copy_d2d(out->data(), old->data(), kBytes, s.get()).ok());  // queued
  void* block = old->data();
  old->reset();  // into the cache; the copy has not run
  EXPECT_EQ(b.pending(), 1u);
  Result<DeviceBuffer> reused = a.allocate(kBytes, Pool::WEIGHTS, "new weight");
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(reused->data(), block);
  EXPECT_EQ(b.pending(), 0u) << "handed out before its reader ran";
  const Vec after = {9, 9, 9, 9};
  std::memcpy(reused->data(), after.data(), kBytes);  // the new owner's upload
  ASSERT_TRUE(b.drain().ok());
  const float* o = static_cast<const float*>(out->data());
  EXPECT_EQ(Vec(o, o + kN), before);
}

TEST(AsyncSimSemantics, OpArgumentsAreCopiedAtEnqueue) {
  AsyncSimBackend b(SimOrder::COPIES_LATE);
  Buffers buf(b);
  float *x = buf.alloc(), *y = buf.alloc();
  const Vec src = {1, 2, 3, 4};
  ASSERT_TRUE(b.copy_h2d(x, src.data(), kBytes, nullptr).ok());
  {
    OpParams p;
    p.alpha = 3.0f;
    std::vector<TensorRef> in = {ref(x)};
    OpCall c;
    c.kind = OpKind::SCALE;
    c.params = &p;
    c.inputs = in;
    c.output = ref(y);
    ASSERT_TRUE(b.op_run(c, nullptr).ok());
    p.alpha = 100.0f;  // too late: the op keeps the params of its launch
    in[0] = ref(nullptr);
  }
  Result<Vec> out = read_back(b, y);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_EQ(*out, (Vec{3, 6, 9, 12}));
}

TEST(AsyncSimSemantics, WaitOnNeverRecordedEventIsANoOp) {
  AsyncSimBackend b(SimOrder::COPIES_EARLY);
  std::unique_ptr<Event> e = make_event(b);
  ASSERT_TRUE(b.stream_wait_event(nullptr, e.get()).ok());
  EXPECT_EQ(b.pending(), 0u);
  EXPECT_TRUE(b.event_sync(e.get()).ok());
}

TEST(AsyncSimSemantics, EventSyncWaitsForTheLatestRecord) {
  AsyncSimBackend b(SimOrder::COPIES_LATE);
  Buffers buf(b);
  float* d = buf.alloc();
  std::unique_ptr<Stream> cs = make_stream(b);
  std::unique_ptr<Event> e = make_event(b);
  const Vec src = {1, 2, 3, 4};
  ASSERT_TRUE(b.event_record(e.get(), cs.get()).ok());
  ASSERT_TRUE(b.copy_h2d(d, src.data(), kBytes, cs.get()).ok());
  ASSERT_TRUE(b.event_record(e.get(), cs.get()).ok());  // re-armed behind the copy
  ASSERT_TRUE(b.event_sync(e.get()).ok());
  EXPECT_EQ(Vec(d, d + kN), src);
  EXPECT_EQ(b.executed(cs.get()), 1u);
}

TEST(AsyncSimSemantics, EventSyncStopsAtItsRecord) {
  AsyncSimBackend b(SimOrder::COPIES_EARLY);
  Buffers buf(b);
  float *d = buf.alloc(), *d2 = buf.alloc();
  std::unique_ptr<Stream> cs = make_stream(b);
  std::unique_ptr<Event> e = make_event(b);
  ASSERT_TRUE(b.memset_zero(d, kBytes, cs.get()).ok());
  ASSERT_TRUE(b.event_record(e.get(), cs.get()).ok());
  ASSERT_TRUE(b.memset_zero(d2, kBytes, cs.get()).ok());
  ASSERT_TRUE(b.event_sync(e.get()).ok());
  EXPECT_EQ(b.executed(cs.get()), 1u);
  EXPECT_EQ(b.pending(), 1u);
  ASSERT_TRUE(b.stream_sync(cs.get()).ok());
  EXPECT_EQ(b.executed(cs.get()), 2u);
  EXPECT_EQ(b.memsets(), 2u);
}

TEST(AsyncSimSemantics, CountersAndQueueDepth) {
  AsyncSimBackend b(SimOrder::ROUND_ROBIN);
  Result<Vec> out = run_ring(b, RingOptions{4, 2, true, true});
  ASSERT_TRUE(out.ok()) << out.status().str();
  // Default stream: 2 memsets, the input copy, 4 muls, the read-back (the last sync's work).
  EXPECT_EQ(b.executed(nullptr), 2u + 1u + 4u + 1u);
  EXPECT_EQ(b.copies(), 4u + 2u);
  EXPECT_EQ(b.ops(), 4u);
  EXPECT_EQ(b.memsets(), 2u);
  // The main loop queues 4 x (wait, mul, record) + the input copy + the read-back unsynced.
  EXPECT_EQ(b.max_queue_depth(nullptr), 4u * 3u + 2u);
  EXPECT_GE(b.max_queue_depth(), b.max_queue_depth(nullptr));
}

TEST(AsyncSimSemantics, OpErrorsSurfaceAtTheSync) {
  AsyncSimBackend b(SimOrder::RANDOM, 7);
  Buffers buf(b);
  float *x = buf.alloc(), *y = buf.alloc();
  const TensorRef in[2] = {{TensorDesc{DType::F16, Shape{kN}}, x}, ref(x)};
  OpParams p;
  OpCall c;
  c.kind = OpKind::MUL;
  c.params = &p;
  c.inputs = in;
  c.output = ref(y);
  ASSERT_TRUE(b.op_run(c, nullptr).ok()) << "errors are deferred, as on a GPU";
  Status st = b.stream_sync(nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("simulated stream 0: mul"), std::string::npos) << st.str();
  EXPECT_TRUE(b.stream_sync(nullptr).ok()) << "an error is reported once";
}

TEST(AsyncSimSemantics, ImplicitSyncErrorsGoToTheNextSync) {
  AsyncSimBackend b(SimOrder::COPIES_LATE);
  float* x = static_cast<float*>(*b.device_alloc(kBytes));
  const TensorRef in[2] = {{TensorDesc{DType::F16, Shape{kN}}, x}, ref(x)};
  OpParams p;
  OpCall c;
  c.kind = OpKind::MUL;
  c.params = &p;
  c.inputs = in;
  c.output = ref(x);
  ASSERT_TRUE(b.op_run(c, nullptr).ok());
  b.device_free(b.device_alloc(16).value());  // runs the failing op
  EXPECT_EQ(b.pending(), 0u);
  EXPECT_FALSE(b.drain().ok());
  EXPECT_TRUE(b.drain().ok());
  b.device_free(x);
}

TEST(AsyncSimSemantics, DestroyedStreamsWorkStillRuns) {
  AsyncSimBackend b(SimOrder::COPIES_LATE);
  Buffers buf(b);
  float* d = buf.alloc();
  const Vec src = {1, 2, 3, 4};
  {
    std::unique_ptr<Stream> cs = make_stream(b);
    ASSERT_TRUE(b.copy_h2d(d, src.data(), kBytes, cs.get()).ok());
  }
  EXPECT_EQ(b.pending(), 1u);
  ASSERT_TRUE(b.drain().ok());
  EXPECT_EQ(Vec(d, d + kN), src);
}

TEST(AsyncSimSemantics, DelegatesAndRefuses) {
  AsyncSimBackend b(SimOrder::COPIES_EARLY);
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  EXPECT_EQ(b.info().kind, "cpu");
  EXPECT_TRUE(b.memory_is_host());
  EXPECT_EQ(b.torch_generator(), TorchGenerator::CPU_MT19937);
  EXPECT_FALSE(b.prefers_stacked_weights());
  b.set_discrete(true);  // Note [device properties]: every property answers as a GPU's
  EXPECT_FALSE(b.memory_is_host());
  EXPECT_EQ(b.torch_generator(), TorchGenerator::CUDA_PHILOX);
  EXPECT_TRUE(b.prefers_stacked_weights());
  EXPECT_EQ(b.compute_dtype_default(), DType::F32) << "its kernels are the CPU's";
  EXPECT_EQ(b.op_supported(OpKind::MUL, DType::F16), cpu->op_supported(OpKind::MUL, DType::F16));
  EXPECT_FALSE(b.capture_supported());
  EXPECT_EQ(b.timing_event_create().status().code(), ErrorCode::UNSUPPORTED);
  EXPECT_NE(b.default_stream(), nullptr);
  // Streams and events of another backend are refused, not misused.
  Status st = b.stream_sync(cpu->default_stream());
  EXPECT_EQ(st.code(), ErrorCode::INVALID_ARGUMENT) << st.str();
  std::unique_ptr<Event> foreign = std::move(cpu->event_create()).value();
  EXPECT_EQ(b.event_record(foreign.get(), nullptr).code(), ErrorCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace hr
