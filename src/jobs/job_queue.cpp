// JobQueue: ComfyUI's PromptQueue with a JobStore behind every change.
#include "jobs/job_queue.h"

#include <algorithm>
#include <cstdlib>

namespace hr {

JobQueue::JobQueue(std::unique_ptr<JobStore> store, size_t max_history)
    : store_(std::move(store)), max_history_(std::max<size_t>(max_history, 1)) {}

Status JobQueue::open() {
  HR_ASSIGN_OR_RETURN(std::vector<Job> jobs, store_->pending_load());
  HR_ASSIGN_OR_RETURN(std::vector<JobRecord> history, store_->history_load());
  std::lock_guard<std::mutex> lock(mu_);
  for (Job& j : jobs) {
    next_number_ = std::max(next_number_, std::abs(j.number) + 1);
    next_seq_ = std::max(next_seq_, j.seq + 1);
    pending_[{j.number, j.seq}] = std::move(j);
  }
  for (JobRecord& r : history) {
    const Json& item = r.entry.value("prompt", Json());
    if (item.is_array() && !item.empty() && item[0].is_number_integer())
      next_number_ = std::max(next_number_, std::abs(item[0].get<int64_t>()) + 1);
    history_.push_back(std::move(r));
  }
  return Status();
}

Result<Job> JobQueue::submit(JobSubmit s) {
  Job j;
  {
    std::lock_guard<std::mutex> lock(mu_);
    j.prompt_id = s.prompt_id.empty() ? prompt_id_new() : s.prompt_id;
    bool queued = running_ && running_->prompt_id == j.prompt_id;
    for (const auto& [k, p] : pending_) queued = queued || p.prompt_id == j.prompt_id;
    if (queued)
      return make_error(ErrorCode::INVALID_ARGUMENT, "prompt_id {} is already queued", j.prompt_id);
    // ComfyUI: number = given or the server's counter; front negates it; the counter advances.
    j.number = s.number.value_or(next_number_);
    if (s.front) j.number = -j.number;
    ++next_number_;
    j.seq = next_seq_++;
    j.prompt = std::move(s.prompt);
    j.extra_data = std::move(s.extra_data);
    j.outputs = std::move(s.outputs);
    HR_TRY(store_->pending_put(j));
    pending_[{j.number, j.seq}] = j;
  }
  cv_.notify_all();
  changed();
  return j;
}

std::optional<Job> JobQueue::take(std::chrono::milliseconds timeout) {
  std::optional<Job> job;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t wakes = wakes_;
    cv_.wait_for(lock, timeout,
                 [&] { return closed_ || wakes_ != wakes || (!pending_.empty() && !running_); });
    if (closed_ || running_ || pending_.empty()) return std::nullopt;
    auto it = pending_.begin();
    running_ = std::move(it->second);
    pending_.erase(it);
    job = running_;
  }
  changed();
  return job;
}

Status JobQueue::finish(const std::string& prompt_id, Json entry) {
  Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_ || running_->prompt_id != prompt_id)
      return make_error(ErrorCode::INTERNAL, "finish: {} is not the running job", prompt_id);
    JobRecord r{prompt_id, std::move(entry)};
    st = store_->history_put(r);
    history_append_locked(std::move(r));
    running_.reset();
  }
  cv_.notify_all();
  changed();
  return st;
}

void JobQueue::release(const std::string& prompt_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_ || running_->prompt_id != prompt_id) return;
    Job j = std::move(*running_);
    running_.reset();
    pending_[{j.number, j.seq}] = std::move(j);
  }
  cv_.notify_all();
  changed();
}

void JobQueue::history_append_locked(JobRecord r) {
  auto same = [&](const JobRecord& h) { return h.prompt_id == r.prompt_id; };
  history_.erase(std::remove_if(history_.begin(), history_.end(), same), history_.end());
  history_.push_back(std::move(r));
  while (history_.size() > max_history_) {
    (void)store_->history_erase(history_.front().prompt_id);
    history_.erase(history_.begin());
  }
}

void JobQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wakes_;
  }
  cv_.notify_all();
}

void JobQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

size_t JobQueue::remaining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size() + (running_ ? 1 : 0);
}

size_t JobQueue::pending_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

std::optional<Job> JobQueue::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

Json JobQueue::queue_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  Json running = Json::array(), pending = Json::array();
  if (running_) running.push_back(running_->queue_item());
  for (const auto& [k, j] : pending_) pending.push_back(j.queue_item());
  return Json{{"queue_running", running}, {"queue_pending", pending}};
}

size_t JobQueue::pending_delete(const std::vector<std::string>& ids) {
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (std::find(ids.begin(), ids.end(), it->second.prompt_id) == ids.end()) {
        ++it;
        continue;
      }
      (void)store_->pending_erase(it->second.prompt_id);
      it = pending_.erase(it);
      ++n;
    }
  }
  if (n) changed();
  return n;
}

size_t JobQueue::pending_clear() {
  size_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = pending_.size();
    // The running job keeps its pending row until it finishes (Note [finish atomically]).
    for (const auto& [k, j] : pending_) (void)store_->pending_erase(j.prompt_id);
    pending_.clear();
  }
  if (n) changed();
  return n;
}

Json JobQueue::history_json(std::optional<size_t> max_items, std::optional<int64_t> offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t size = int64_t(history_.size());
  int64_t begin = 0, end = size;
  if (max_items) {
    // ComfyUI: offset -1 (the default) means the last max_items entries.
    begin = offset && *offset >= 0 ? *offset : std::max<int64_t>(0, size - int64_t(*max_items));
    end = std::min<int64_t>(size, begin + int64_t(*max_items));
  } else if (offset && *offset >= 0) {
    begin = *offset;
  }
  Json out = Json::object();
  for (int64_t i = begin; i < end; ++i)
    out[history_[size_t(i)].prompt_id] = history_[size_t(i)].entry;
  return out;
}

Json JobQueue::history_get(const std::string& prompt_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const JobRecord& r : history_)
    if (r.prompt_id == prompt_id) return Json{{prompt_id, r.entry}};
  return Json::object();
}

void JobQueue::history_delete(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : ids) {
    (void)store_->history_erase(id);
    auto same = [&](const JobRecord& h) { return h.prompt_id == id; };
    history_.erase(std::remove_if(history_.begin(), history_.end(), same), history_.end());
  }
}

void JobQueue::history_clear() {
  std::lock_guard<std::mutex> lock(mu_);
  (void)store_->history_clear();
  history_.clear();
}

size_t JobQueue::history_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return history_.size();
}

void JobQueue::set_on_change(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  on_change_ = std::move(fn);
}

void JobQueue::changed() {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn = on_change_;
  }
  if (fn) fn();
}

}  // namespace hr
