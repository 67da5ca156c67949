// Telemetry: the sample ring, the sampler thread, node boundaries and the per-lens summary.
#include "memory/telemetry.h"

#include <algorithm>

#include "core/bytes.h"
#include "core/signal_stack.h"

namespace hr {

Telemetry::Telemetry(Allocator& allocator, std::unique_ptr<DriverLens> lens,
                     TelemetryOptions options)
    : allocator_(allocator),
      lens_(std::move(lens)),
      options_(options),
      start_(std::chrono::steady_clock::now()) {
  if (options_.capacity == 0) options_.capacity = 1;
  if (options_.period_ms <= 0) options_.period_ms = 1;
  ring_.reserve(options_.capacity);
  std::lock_guard<std::mutex> lock(mu_);
  allocator_.peak_window_take();  // Note [node peak]: the run's first window starts now
  AllocatorSegments a = segments_now();
  peaks_.allocator = a;
  DriverSample d = driver_sample(false);
  if (d.per_process && d.this_process > a.total) context_overhead_ = d.this_process - a.total;
  push(sample_make(SampleKind::PERIODIC, now_ms(), std::move(d)));
}

Telemetry::~Telemetry() { stop(); }

double Telemetry::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
      .count();
}

AllocatorSegments Telemetry::segments_now() const {
  AllocatorSegments s;
  s.context = allocator_.stats(Pool::CONTEXT).current;
  s.weights = allocator_.stats(Pool::WEIGHTS).current;
  s.activations = allocator_.stats(Pool::ACTIVATIONS).current;
  s.staging = allocator_.stats(Pool::STAGING).current;
  s.other = allocator_.stats(Pool::OTHER).current;
  s.total = s.context + s.weights + s.activations + s.staging + s.other;
  s.budget = allocator_.budget();
  return s;
}

AllocatorSegments Telemetry::segments_of(const PeakWindow& w) const {
  AllocatorSegments s;
  s.context = w.pools[size_t(Pool::CONTEXT)];
  s.weights = w.pools[size_t(Pool::WEIGHTS)];
  s.activations = w.pools[size_t(Pool::ACTIVATIONS)];
  s.staging = w.pools[size_t(Pool::STAGING)];
  s.other = w.pools[size_t(Pool::OTHER)];
  s.total = w.total;
  s.budget = allocator_.budget();
  return s;
}

void Telemetry::window_fold() {
  PeakWindow w = allocator_.peak_window_take();
  if (w.total > peaks_.allocator.total) peaks_.allocator = segments_of(w);
  if (node_running_ && w.total > node_.measured) {
    node_.measured = w.total;
    node_.at_peak = segments_of(w);
  }
}

DriverSample Telemetry::driver_sample(bool may_reuse) {
  double t = now_ms();
  if (may_reuse && t - last_driver_ms_ < options_.driver_reuse_ms) return last_driver_;
  last_driver_ = lens_->sample();
  last_driver_ms_ = t;
  return last_driver_;
}

TelemetrySample Telemetry::sample_make(SampleKind kind, double t, DriverSample driver) const {
  TelemetrySample s;
  s.time_ms = t;
  s.kind = kind;
  s.allocator = segments_now();
  s.driver = std::move(driver);
  if (node_running_) {
    s.node = node_.name;
    s.node_planned_peak = node_.planned;
    s.node_measured_peak = node_.measured;
  }
  return s;
}

void Telemetry::push(TelemetrySample s) {
  s.seq = ++seq_;
  ++peaks_.samples;
  if (s.driver.kind != DriverSource::NONE &&
      (peaks_.driver.kind == DriverSource::NONE || s.driver.used > peaks_.driver.used))
    peaks_.driver = s.driver;
  if (ring_.size() < options_.capacity) {
    ring_.push_back(std::move(s));
  } else {
    ring_[ring_next_] = std::move(s);
    ring_next_ = (ring_next_ + 1) % options_.capacity;
  }
}

void Telemetry::sample_now() {
  std::lock_guard<std::mutex> lock(mu_);
  window_fold();
  DriverSample d = driver_sample(false);
  push(sample_make(SampleKind::PERIODIC, now_ms(), std::move(d)));
}

void Telemetry::node_begin(const std::string& node, uint64_t planned_peak) {
  std::lock_guard<std::mutex> lock(mu_);
  if (node_running_) node_end_locked();
  window_fold();  // what came before belongs to no node
  AllocatorSegments now = segments_now();
  node_running_ = true;
  node_ = Node{node, planned_peak, now.total, now, now_ms()};
  DriverSample d = driver_sample(true);
  push(sample_make(SampleKind::NODE_BEGIN, node_.begin_ms, std::move(d)));
}

NodePeak Telemetry::node_end() {
  std::lock_guard<std::mutex> lock(mu_);
  return node_end_locked();
}

NodePeak Telemetry::node_end_locked() {
  if (!node_running_) return NodePeak{};
  window_fold();
  double t = now_ms();
  DriverSample d = driver_sample(true);
  TelemetrySample s = sample_make(SampleKind::NODE_END, t, std::move(d));
  s.allocator = node_.at_peak;  // Note [node peak]: the segments at the node's peak
  push(std::move(s));
  node_running_ = false;
  return NodePeak{node_.name, node_.planned, node_.measured, node_.at_peak, node_.begin_ms, t};
}

std::vector<TelemetrySample> Telemetry::snapshot(double since_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TelemetrySample> out;
  size_t n = ring_.size();
  size_t first = n < options_.capacity ? 0 : ring_next_;
  for (size_t i = 0; i < n; ++i) {
    const TelemetrySample& s = ring_[(first + i) % n];
    if (s.time_ms > since_ms) out.push_back(s);
  }
  return out;
}

TelemetrySample Telemetry::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return TelemetrySample{};
  size_t n = ring_.size();
  size_t last = n < options_.capacity ? n - 1 : (ring_next_ + n - 1) % n;
  return ring_[last];
}

TelemetryPeaks Telemetry::peaks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peaks_;
}

uint64_t Telemetry::context_overhead() const {
  std::lock_guard<std::mutex> lock(mu_);
  return context_overhead_;
}

void Telemetry::start() {
  std::lock_guard<std::mutex> guard(thread_mu_);
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = false;
  }
  thread_ = std::thread([this] {
    signal_stack_install();
    sampler_loop();
  });
}

void Telemetry::stop() {
  std::lock_guard<std::mutex> guard(thread_mu_);
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

bool Telemetry::running() const {
  std::lock_guard<std::mutex> guard(thread_mu_);
  return thread_.joinable();
}

void Telemetry::sampler_loop() {
  const auto period = std::chrono::milliseconds(options_.period_ms);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_requested_; })) {
    lock.unlock();
    sample_now();
    lock.lock();
  }
}

std::vector<std::string> Telemetry::summary_lines() const {
  TelemetryPeaks p = peaks();
  uint64_t overhead = context_overhead();
  const AllocatorSegments& a = p.allocator;
  std::string budget = a.budget == Allocator::kUnlimited
                           ? std::string(", no budget")
                           : fmt::format(" of budget {}", bytes_format(a.budget));
  std::string other = a.other ? fmt::format(", other {}", bytes_format(a.other)) : std::string();
  std::string alloc_line = fmt::format(
      "allocator level: peak {}{} (context {}, weights {}, activations {}, staging {}{})",
      bytes_format(a.total), budget, bytes_format(a.context), bytes_format(a.weights),
      bytes_format(a.activations), bytes_format(a.staging), other);

  const DriverSample& d = p.driver;
  std::string driver_line;
  if (d.kind == DriverSource::NONE) {
    driver_line = "driver level: no samples";
  } else {
    std::string who =
        d.per_process ? fmt::format(
                            "this process {}, of which {} context and overhead measured at start; "
                            "other processes {}",
                            bytes_format(d.this_process), bytes_format(overhead),
                            bytes_format(d.other_processes))
                      : std::string("per-process usage not measured");
    driver_line = fmt::format("driver level ({}): peak {} used of {} ({})", d.source,
                              bytes_format(d.used), bytes_format(d.total), who);
  }
  return {alloc_line, driver_line};
}

}  // namespace hr
