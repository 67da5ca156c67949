// VramFeed: a thread that turns telemetry samples into vram_update messages.
#include "server/vram_feed.h"

#include <chrono>
#include <cstdlib>

#include "core/signal_stack.h"

namespace hr {
namespace {

Json segments_json(const AllocatorSegments& a) {
  return Json{{"context", a.context}, {"weights", a.weights}, {"activations", a.activations},
              {"staging", a.staging}, {"other", a.other},     {"total", a.total}};
}

// Idle updates only when something moved by more than this (sampling noise of RSS etc.).
constexpr uint64_t kIdleChange = 1ull << 20;

uint64_t diff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

}  // namespace

Json vram_json(const TelemetrySample& s, const MemoryLevels& levels, uint64_t budget) {
  const bool limited = budget != Allocator::kUnlimited;
  auto level = [&](double f) {
    return limited ? Json(MemoryLevels::level_bytes(budget, f)) : Json(nullptr);
  };
  return Json{{"time_ms", s.time_ms},
              {"allocator", segments_json(s.allocator)},
              {"driver",
               {{"used", s.driver.used},
                {"total", s.driver.total},
                {"this_process", s.driver.this_process},
                {"other_processes", s.driver.other_processes},
                {"per_process", s.driver.per_process},
                {"source", s.driver.source}}},
              {"budget", limited ? Json(budget) : Json(nullptr)},
              {"job_budget", s.allocator.budget != budget ? Json(s.allocator.budget) : Json(nullptr)},
              {"warning", level(levels.warning())},
              {"danger", level(levels.danger())},
              {"warning_fraction", levels.warning()},
              {"danger_fraction", levels.danger()},
              {"node", s.node.empty() ? Json(nullptr) : Json(s.node)},
              {"node_planned_peak", s.node_planned_peak},
              {"node_measured_peak", s.node_measured_peak}};
}

VramFeed::VramFeed(Telemetry& telemetry, const ServerConfig& config, const MemoryLevels& levels,
                   uint64_t budget, std::function<bool()> busy,
                   std::function<void(const Json&)> send)
    : telemetry_(telemetry),
      config_(config),
      levels_(levels),
      budget_(budget),
      busy_(std::move(busy)),
      send_(std::move(send)) {}

VramFeed::~VramFeed() { stop(); }

void VramFeed::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    signal_stack_install();
    loop();
  });
}

void VramFeed::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void VramFeed::resend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    resend_ = true;
  }
  cv_.notify_all();
}

void VramFeed::loop() {
  TelemetrySample last;
  bool sent = false;
  double warning = 0, danger = 0;  // the levels last sent
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const bool busy = busy_();
    const bool again = resend_;
    resend_ = false;
    lock.unlock();
    TelemetrySample s = telemetry_.latest();
    // New levels (POST /headroom/levels) are news too: clients draw them and colour by them.
    const bool levels_moved = levels_.warning() != warning || levels_.danger() != danger;
    const bool moved = !sent || diff(s.allocator.total, last.allocator.total) > kIdleChange ||
                       diff(s.driver.used, last.driver.used) > kIdleChange || s.node != last.node;
    if (s.seq != 0 && (again || ((s.seq != last.seq || levels_moved) && (busy || moved || levels_moved)))) {
      warning = levels_.warning();
      danger = levels_.danger();
      send_(vram_json(s, levels_, budget_));
      last = s;
      sent = true;
    }
    lock.lock();
    cv_.wait_for(lock,
                 std::chrono::milliseconds(busy ? config_.vram_busy_ms : config_.vram_idle_ms),
                 [this] { return stop_ || resend_; });
  }
}

}  // namespace hr
