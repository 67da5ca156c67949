// RedisJobSource: a worker's reads, claims, finishes and dead letters on the job streams.
#include "jobs/redis_job_source.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "core/json_parse.h"
#include "jobs/redis_client.h"
#include "jobs/redis_keys.h"
#include "jobs/redis_queue_state.h"
#include "jobs/redis_wire.h"
#include "jobs/vram_class.h"

namespace hr {

// Note [redis job lifecycle]: a front adds the job to hash `pending` and XADDs it to its class's
// stream. A worker reads it (XREADGROUP: now in the group's pending entries list, PEL, owned by
// this worker), then in one MULTI moves it from `pending` to `running`. While it runs, the
// worker's heartbeat XCLAIMs the entry to itself every second (JUSTID: the delivery count stays),
// so its idle time stays below the lease. Finishing writes the history entry, removes it from
// `running` and XACKs + XDELs the entry in one MULTI: at every moment the job is in `pending`
// or `running` (with its entry in a PEL) or in history, so a kill -9 loses nothing. A killed
// worker's entry idles past the lease; another worker XAUTOCLAIMs it (delivery count + 1) and
// runs it again; past max_deliveries it goes to the dead-letter stream and history as failed.
// Streams are read front streams first, then by class, largest first: a large worker serves the
// jobs only it can run before the ones smaller workers can take too.
namespace {

constexpr int kFinishAttempts = 10;  // Redis briefly away at the end of a job: retry, then give up
constexpr std::chrono::milliseconds kFinishRetry{300};
constexpr uint64_t kTrimEvery = 64;  // history trimmed to max_history every N finishes

std::string ms_now() { return std::to_string(message_timestamp_ms()); }

// [id, [field, value, ...]] -> the value of "job", or "" when absent (a malformed entry).
std::string job_field(const RedisReply& entry) {
  const RedisReply& f = entry.at(1);
  for (size_t i = 0; i + 1 < f.elements.size(); i += 2)
    if (f.elements[i].str == "job") return f.elements[i + 1].str;
  return "";
}

}  // namespace

RedisJobSource::RedisJobSource(std::shared_ptr<RedisClient> redis, RedisWorkerOptions o)
    : redis_(std::move(redis)), opt_(std::move(o)) {
  const std::vector<uint64_t> classes = vram_classes_upto(opt_.budget);
  for (bool front : {true, false})
    for (uint64_t c : classes) streams_.push_back(redis_keys::stream(c, front));
}

Result<std::unique_ptr<RedisJobSource>> RedisJobSource::open(std::shared_ptr<RedisClient> redis,
                                                             RedisWorkerOptions options) {
  std::unique_ptr<RedisJobSource> s(new RedisJobSource(std::move(redis), std::move(options)));
  if (s->streams_.empty())
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "a budget of {} bytes is below the smallest VRAM class ({}): this worker "
                      "could run no job",
                      s->opt_.budget, vram_class_name(vram_classes().front()));
  HR_TRY(s->groups_create());
  return s;
}

Status RedisJobSource::groups_create() {
  std::vector<RedisArgs> cmds;
  for (const std::string& s : streams_)
    cmds.push_back({"XGROUP", "CREATE", s, redis_keys::kGroup, "0", "MKSTREAM"});
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> r, redis_->pipeline(cmds));
  for (const RedisReply& e : r)
    if (e.type == RedisReply::Type::ERROR && e.str.rfind("BUSYGROUP", 0) != 0)
      return make_error(ErrorCode::IO, "redis: XGROUP CREATE: {}", e.str);
  return Status();
}

void RedisJobSource::error_log(const Status& st) {
  if (st.ok()) {
    failing_ = false;
    return;
  }
  if (!failing_) std::fprintf(stderr, "headroom worker: %s\n", st.str().c_str());
  failing_ = true;
}

std::optional<Job> RedisJobSource::take(std::chrono::milliseconds timeout) {
  for (int tries = 0; tries < 8; ++tries) {  // entries skipped (deleted, dead) do not wait
    Result<std::optional<Delivery>> d = claim_expired();
    if (d.ok() && !*d) d = read_new();
    error_log(d.status());
    if (!d.ok() || !*d) break;
    Result<std::optional<Job>> job = start(**d);
    error_log(job.status());
    if (job.ok() && *job) return *job;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return woken_; });
  woken_ = false;
  return std::nullopt;
}

void RedisJobSource::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

Result<std::optional<RedisJobSource::Delivery>> RedisJobSource::read_new() {
  std::vector<RedisArgs> lens;
  for (const std::string& s : streams_) lens.push_back({"XLEN", s});
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> n, redis_->pipeline(lens));
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (n[i].integer <= 0) continue;
    Result<RedisReply> r = redis_->command({"XREADGROUP", "GROUP", redis_keys::kGroup,
                                            opt_.worker_id, "COUNT", "1", "STREAMS", streams_[i],
                                            ">"});
    if (!r.ok() && r.status().message().find("NOGROUP") != std::string::npos) {
      HR_TRY(groups_create());  // the streams were deleted (FLUSHDB): made again
      continue;
    }
    HR_TRY(r.status());
    // [[stream, [[id, [field, value, ...]]]]]
    const RedisReply& entry = r->at(0).at(1).at(0);
    if (entry.nil()) continue;
    return std::optional<Delivery>(Delivery{streams_[i], entry.at(0).str, job_field(entry), 1});
  }
  return std::optional<Delivery>();
}

Result<std::optional<RedisJobSource::Delivery>> RedisJobSource::claim_expired() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_claim_) return std::optional<Delivery>();
  next_claim_ = now + std::max(opt_.lease / 4, std::chrono::milliseconds(200));
  std::vector<RedisArgs> pend;
  for (const std::string& s : streams_) pend.push_back({"XPENDING", s, redis_keys::kGroup});
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> p, redis_->pipeline(pend));
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (p[i].at(0).integer <= 0) continue;
    HR_ASSIGN_OR_RETURN(RedisReply r,
                        redis_->command({"XAUTOCLAIM", streams_[i], redis_keys::kGroup,
                                         opt_.worker_id, std::to_string(opt_.lease.count()), "0-0",
                                         "COUNT", "1"}));
    const RedisReply& entry = r.at(1).at(0);  // [cursor, [[id, fields]], [deleted ids]]
    if (entry.nil()) continue;
    const std::string id = entry.at(0).str;
    HR_ASSIGN_OR_RETURN(RedisReply info, redis_->command({"XPENDING", streams_[i],
                                                          redis_keys::kGroup, id, id, "1"}));
    const int64_t count = std::max<int64_t>(info.at(0).at(3).integer, 2);
    std::fprintf(stderr, "headroom worker: claimed %s from %s (idle past the lease; delivery %lld)\n",
                 id.c_str(), streams_[i].c_str(), (long long)count);
    return std::optional<Delivery>(Delivery{streams_[i], id, job_field(entry), count});
  }
  return std::optional<Delivery>();
}

Result<std::optional<Job>> RedisJobSource::start(const Delivery& d) {
  Result<Job> job = job_decode(d.fields_job);
  if (!job.ok()) {
    HR_TRY(dead_letter(d, job.status().message(), nullptr));
    return std::optional<Job>();
  }
  if (d.deliveries > opt_.max_deliveries) {
    HR_TRY(dead_letter(d,
                       fmt::format("the job was delivered {} times (--max-deliveries {}): its "
                                   "workers died while running it",
                                   d.deliveries, opt_.max_deliveries),
                       &*job));
    return std::optional<Job>();
  }
  const std::string& id = job->prompt_id;
  HR_ASSIGN_OR_RETURN(Json fields, json_parse(d.fields_job, kJsonStoredMaxDepth));
  const std::string rec = Json{{"job", std::move(fields)}, {"worker", opt_.worker_id},
                               {"stream", d.stream}, {"entry", d.entry}, {"started", ms_now()}}
                              .dump();
  HR_ASSIGN_OR_RETURN(RedisReply r, redis_->transaction({{"HDEL", redis_keys::kPending, id},
                                                          {"HGET", redis_keys::kRunning, id},
                                                          {"HSET", redis_keys::kRunning, id, rec}}));
  if (r.at(0).integer == 0 && r.at(1).nil()) {  // deleted from the queue (POST /queue) meanwhile
    HR_TRY(redis_->command({"HDEL", redis_keys::kRunning, id}).status());
    HR_TRY(drop(d));
    return std::optional<Job>();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = d;
    current_id_ = id;
    current_job_ = *job;
  }
  if (!opt_.crash_marker.empty() && job->prompt.dump().find(opt_.crash_marker) != std::string::npos)
    ::kill(::getpid(), SIGKILL);  // the test hook of RedisWorkerOptions::crash_marker
  status_publish();
  return std::optional<Job>(std::move(job).value());
}

Status RedisJobSource::drop(const Delivery& d) {
  return redis_
      ->transaction({{"XACK", d.stream, redis_keys::kGroup, d.entry}, {"XDEL", d.stream, d.entry}})
      .status();
}

Status RedisJobSource::dead_letter(const Delivery& d, const std::string& why, const Job* job) {
  std::fprintf(stderr, "headroom worker: %s %s to %s: %s\n", d.stream.c_str(), d.entry.c_str(),
               redis_keys::kDead.c_str(), why.c_str());
  std::vector<RedisArgs> cmds = {
      {"XADD", redis_keys::kDead, "*", "job", d.fields_job, "reason", why, "stream", d.stream,
       "entry", d.entry, "deliveries", std::to_string(d.deliveries), "worker", opt_.worker_id},
      {"XACK", d.stream, redis_keys::kGroup, d.entry},
      {"XDEL", d.stream, d.entry}};
  if (!job) return redis_->transaction(cmds).status();
  JobFailure f{"", "", {}, why, "headroom.DeadLetter", {}};
  const Json error = msg_execution_error(job->prompt_id, f);
  const Json entry = {{"prompt", job->queue_item()},
                      {"outputs", Json::object()},
                      {"status",
                       {{"status_str", "error"},
                        {"completed", false},
                        {"messages", Json::array({Json::array({"execution_error", error})})}}},
                      {"meta", Json::object()},
                      {"headroom", {{"dead_letter", why}, {"deliveries", d.deliveries}}}};
  HR_ASSIGN_OR_RETURN(RedisReply seq, redis_->command({"INCR", redis_keys::kHistorySeq}));
  cmds.push_back({"HDEL", redis_keys::kPending, job->prompt_id});
  cmds.push_back({"HDEL", redis_keys::kRunning, job->prompt_id});
  cmds.push_back({"HSET", redis_keys::kHistory, job->prompt_id, entry.dump()});
  cmds.push_back({"ZADD", redis_keys::kHistoryOrder, std::to_string(seq.integer), job->prompt_id});
  HR_TRY(redis_->transaction(cmds).status());
  if (sink_) {
    sink_(JobMessage{"execution_error", error, job->client_id()});
    sink_(JobMessage{"executing", msg_executing(job->prompt_id, ""), job->client_id()});
  }
  status_publish();
  return Status();
}

Status RedisJobSource::finish(const std::string& prompt_id, Json entry) {
  std::optional<Delivery> d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_id_ != prompt_id)
      return make_error(ErrorCode::INTERNAL, "finish: {} is not the running job", prompt_id);
    d = current_;
  }
  entry["headroom"]["worker"] = opt_.worker_id;
  Status st;
  for (int attempt = 0; attempt < kFinishAttempts; ++attempt) {
    if (attempt) std::this_thread::sleep_for(kFinishRetry);
    Result<RedisReply> seq = redis_->command({"INCR", redis_keys::kHistorySeq});
    st = seq.status();
    if (!st.ok()) continue;
    st = redis_->transaction({{"HSET", redis_keys::kHistory, prompt_id, entry.dump()},
                              {"ZADD", redis_keys::kHistoryOrder, std::to_string(seq->integer),
                               prompt_id},
                              {"HDEL", redis_keys::kRunning, prompt_id},
                              {"XACK", d->stream, redis_keys::kGroup, d->entry},
                              {"XDEL", d->stream, d->entry}})
             .status();
    if (st.ok()) {
      if (uint64_t(seq->integer) % kTrimEvery == 0) (void)history_trim(*redis_, opt_.max_history);
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_.reset();  // on failure the lease runs out and another worker runs it again
    current_id_.clear();
  }
  status_publish();
  return st;
}

void RedisJobSource::release(const std::string& prompt_id) {
  std::optional<Delivery> d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_id_ != prompt_id) return;
    d = current_;
    current_.reset();
    current_id_.clear();
  }
  Status st = redis_
                  ->transaction({{"XACK", d->stream, redis_keys::kGroup, d->entry},
                                 {"XDEL", d->stream, d->entry},
                                 {"XADD", d->stream, "*", "job", d->fields_job},
                                 {"HDEL", redis_keys::kRunning, prompt_id},
                                 {"HSET", redis_keys::kPending, prompt_id, d->fields_job}})
                  .status();
  // Not put back: its lease runs out and another worker claims it (Note [redis job lifecycle]).
  if (!st.ok()) std::fprintf(stderr, "headroom worker: release %s: %s\n", prompt_id.c_str(),
                             st.str().c_str());
}

// Note [waiting across workers]: the worker reclaims its idle cached weights at the danger level
// only while jobs wait (Note [danger hold]). Here a job may wait in `pending` or as the running
// job of a worker that died (it is claimed once its lease runs out), so both count: otherwise a
// worker full of cached weights would hold forever while a dead worker's job waits for it.
size_t RedisJobSource::pending_count() const {
  Result<size_t> r = queue_remaining(*redis_);
  if (!r.ok()) return 0;
  const size_t mine = running_id().empty() ? 0 : 1;
  return *r > mine ? *r - mine : 0;
}

void RedisJobSource::lease_renew() {
  std::optional<Delivery> d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    d = current_;
  }
  if (!d) return;
  Result<RedisReply> r = redis_->command(
      {"XCLAIM", d->stream, redis_keys::kGroup, opt_.worker_id, "0", d->entry, "JUSTID"});
  if (!r.ok()) std::fprintf(stderr, "headroom worker: lease: %s\n", r.status().str().c_str());
}

std::string RedisJobSource::running_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_id_;
}

void RedisJobSource::status_publish() {
  if (!sink_) return;
  Result<size_t> n = queue_remaining(*redis_);
  if (n.ok()) sink_(JobMessage{"status", msg_status(*n), ""});
}

}  // namespace hr
