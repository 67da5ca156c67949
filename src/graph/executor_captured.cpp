// The captured strategy (Note [captured steps]): the second run of a compiled graph records its
// ops once, later runs with the same bindings replay the recording with one launch.
#include "graph/executor.h"

#include <cstring>

#include "core/env.h"

namespace hr {

std::vector<const void*> RunState::signature() const {
  std::vector<const void*> sig;
  for (size_t k = 0; k < uses.size(); ++k) {
    sig.push_back(at.ptr[size_t(uses[k].value)]);
    sig.push_back(at.host.empty() ? nullptr : at.host[k]);
  }
  if (at.source) at.source->patch_signature(sig);
  return sig;
}

// Note [captured steps]
// On backends that can capture, the second run of a plan records its ops (and the input copies,
// from pinned staging) once; later runs with the same arena and weight pointers replay them
// with one launch. Any capture failure falls back to plain runs. The captures, their staging
// and whether one is still good for a run's bindings are CaptureCache's (capture_cache.h).

// HEADROOM_DEBUG_CAPTURE=1 traces capture decisions on stderr (for reports of replay crashes).
void Executor::capture_trace(const char* what, const RunState& r) const {
  static const bool on = env_switch("HEADROOM_DEBUG_CAPTURE", false);
  if (!on) return;
  size_t streamed = 0;
  for (const void* h : r.at.host) streamed += h != nullptr;
  fmt::print(stderr, "capture: plan {} ({} nodes): {}; arena {}, ring {} ({} B), {} streamed\n",
             static_cast<const void*>(r.compiled.get()), r.g.nodes().size(), what,
             static_cast<const void*>(r.at.base), static_cast<const void*>(r.at.ring),
             buffers_.ring.size(), streamed);
}

// Replay or record (Note [captured steps]); UNSUPPORTED sends the caller to a plain run.
Result<std::vector<HostTensor>> Executor::run_captured(RunState& r) {
  Capture& cap = captures_.entry(r.compiled);
  if (cap.failed || cap.runs++ < 1) return Status(ErrorCode::UNSUPPORTED, "not captured yet");
  const std::vector<Value>& vals = r.g.values();
  const bool streams = r.res.streams();
  std::vector<const void*> sig = r.signature();
  if (cap.work && !captures_.current(cap, r.at.base, sig, buffers_.gen, streams)) {
    capture_trace("bindings changed: captured again", r);
    cap.work.reset();
  }
  if (!captures_.staging_make(cap, vals)) {  // over the pinned budget: plain runs (a capture
    cap.failed = true;                       // needs page-locked inputs)
    return Status(ErrorCode::UNSUPPORTED, "no page-locked staging for the inputs");
  }
  for (size_t v = 0; v < vals.size(); ++v)
    if (cap.staging[v].second)
      std::memcpy(cap.staging[v].first, r.at.bound[v]->data(), cap.staging[v].second);
  r.at.staging = &cap.staging;
  if (!cap.work) {
    // Note [pageable sources]: a weight beyond the pinned budget streams from pageable memory;
    // a recorded copy from it would be replayed by the CPU from wherever that memory has gone.
    for (const void* h : r.at.host)
      if (h && !backend_.host_pinned(h)) {
        r.at.staging = nullptr;
        capture_trace("not captured: a streamed weight is in pageable host memory", r);
        return Status(ErrorCode::UNSUPPORTED, "a streamed weight is in pageable host memory");
      }
    HR_TRY(backend_.stream_sync(r.at.stream));
    if (streams) HR_TRY(backend_.stream_sync(copies_.stream()));
    if (backend_.capture_begin(r.at.stream).ok()) {
      Status ran = ops_issue(r);
      Result<std::unique_ptr<CapturedWork>> w = backend_.capture_end(r.at.stream);
      if (ran.ok() && w.ok()) {
        captures_.record(cap, std::move(w).value(), r.at.base, std::move(sig), buffers_.gen);
        capture_trace("captured", r);
      }
    }
    if (!cap.work) {
      cap.failed = true;
      r.at.staging = nullptr;
      return Status(ErrorCode::UNSUPPORTED, "capture failed");
    }
  }
  capture_trace("replay", r);
  HR_TRY(backend_.captured_launch(cap.work.get(), r.at.stream));
  if (streams) copies_.replayed(r.res.streamed_bytes);
  return outputs_collect(r);
}

}  // namespace hr
