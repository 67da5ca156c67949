// RedisClient on hiredis's blocking API (HEADROOM_HAVE_HIREDIS), or a stub that says how to get it.
#include "jobs/redis_client.h"

#ifdef HEADROOM_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <poll.h>
#endif

#include <cerrno>

namespace hr {

const RedisReply& RedisReply::at(size_t n) const {
  static const RedisReply kNil;
  return n < elements.size() ? elements[n] : kNil;
}

std::string redis_text(const RedisReply& r) {
  if (r.type == RedisReply::Type::STRING || r.type == RedisReply::Type::STATUS) return r.str;
  if (r.type == RedisReply::Type::INTEGER) return std::to_string(r.integer);
  return "";
}

#ifdef HEADROOM_HAVE_HIREDIS

namespace {

constexpr timeval kConnectTimeout = {2, 0};
// No command of ours blocks in Redis (no BLOCK arguments), so a reply later than this means
// Redis or the network is stuck: the call fails instead of hanging a request or the worker.
constexpr timeval kCommandTimeout = {5, 0};

redisContext* ctx_of(void* p) { return static_cast<redisContext*>(p); }

RedisReply reply_copy(const redisReply* r) {
  RedisReply out;
  if (!r) return out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::STRING;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::STATUS;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::ERROR;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::INTEGER;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::ARRAY;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(reply_copy(r->element[i]));
      break;
    default:  // NIL (and RESP3 types, which a RESP2 connection never sends)
      break;
  }
  return out;
}

}  // namespace

bool redis_available() { return true; }

Result<std::unique_ptr<RedisClient>> RedisClient::connect(const RedisUrl& url) {
  std::unique_ptr<RedisClient> c(new RedisClient(url));
  std::lock_guard<std::mutex> lock(c->mu_);
  HR_TRY(c->reconnect_locked());
  return c;
}

RedisClient::~RedisClient() {
  if (ctx_) redisFree(ctx_of(ctx_));
}

Status RedisClient::fail_locked(const std::string& what) {
  std::string why = ctx_ ? ctx_of(ctx_)->errstr : "no connection";
  if (ctx_) redisFree(ctx_of(ctx_));
  ctx_ = nullptr;  // Note [redis reconnect]
  return make_error(ErrorCode::IO, "redis at {}: {}: {}", url_.str(), what, why);
}

Status RedisClient::reconnect_locked() {
  if (ctx_ && !ctx_of(ctx_)->err) return Status();
  if (ctx_) redisFree(ctx_of(ctx_));
  ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, kConnectTimeout);
  if (!ctx_) return make_error(ErrorCode::IO, "redis at {}: cannot allocate a context", url_.str());
  if (ctx_of(ctx_)->err) return fail_locked("cannot connect (is redis-server running?)");
  redisSetTimeout(ctx_of(ctx_), kCommandTimeout);
  redisEnableKeepAlive(ctx_of(ctx_));
  std::vector<RedisArgs> setup;
  if (!url_.password.empty())
    setup.push_back(url_.user.empty() ? RedisArgs{"AUTH", url_.password}
                                      : RedisArgs{"AUTH", url_.user, url_.password});
  if (url_.db != 0) setup.push_back({"SELECT", std::to_string(url_.db)});
  if (setup.empty()) return Status();
  HR_TRY(send_locked(setup));
  for (size_t i = 0; i < setup.size(); ++i) {
    HR_ASSIGN_OR_RETURN(RedisReply r, read_locked());
    if (r.type == RedisReply::Type::ERROR) {
      redisFree(ctx_of(ctx_));
      ctx_ = nullptr;
      return make_error(ErrorCode::INVALID_ARGUMENT, "redis at {}: {}", url_.str(), r.str);
    }
  }
  return Status();
}

Status RedisClient::send_locked(const std::vector<RedisArgs>& cmds) {
  for (const RedisArgs& a : cmds) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& s : a) {
      argv.push_back(s.data());
      lens.push_back(s.size());
    }
    if (redisAppendCommandArgv(ctx_of(ctx_), int(argv.size()), argv.data(), lens.data()) !=
        REDIS_OK)
      return fail_locked("cannot send " + (a.empty() ? std::string() : a[0]));
  }
  return Status();
}

Result<RedisReply> RedisClient::read_locked() {
  void* raw = nullptr;
  if (redisGetReply(ctx_of(ctx_), &raw) != REDIS_OK) return fail_locked("no reply");
  RedisReply r = reply_copy(static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  return r;
}

Result<std::vector<RedisReply>> RedisClient::pipeline(const std::vector<RedisArgs>& cmds) {
  std::lock_guard<std::mutex> lock(mu_);
  HR_TRY(reconnect_locked());
  HR_TRY(send_locked(cmds));
  std::vector<RedisReply> out;
  for (size_t i = 0; i < cmds.size(); ++i) {
    HR_ASSIGN_OR_RETURN(RedisReply r, read_locked());
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::optional<RedisReply>> RedisClient::next_push(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  HR_TRY(reconnect_locked());
  redisContext* c = ctx_of(ctx_);
  void* raw = nullptr;
  if (redisGetReplyFromReader(c, &raw) != REDIS_OK) return fail_locked("bad reply");
  if (!raw) {
    pollfd p{c->fd, POLLIN, 0};
    const int n = ::poll(&p, 1, int(timeout.count()));
    if (n == 0 || (n < 0 && errno == EINTR)) return std::optional<RedisReply>();
    if (n < 0 || redisBufferRead(c) != REDIS_OK) return fail_locked("cannot read");
    if (redisGetReplyFromReader(c, &raw) != REDIS_OK) return fail_locked("bad reply");
    if (!raw) return std::optional<RedisReply>();
  }
  RedisReply r = reply_copy(static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  return std::optional<RedisReply>(std::move(r));
}

#else  // no hiredis

bool redis_available() { return false; }

Result<std::unique_ptr<RedisClient>> RedisClient::connect(const RedisUrl& url) {
  return make_error(ErrorCode::UNSUPPORTED,
                    "this headroom was built without hiredis, so --queue {} cannot be used: "
                    "install libhiredis-dev (.ci/install-deps) and build again",
                    url.str());
}

RedisClient::~RedisClient() = default;
Status RedisClient::reconnect_locked() { return make_error(ErrorCode::UNSUPPORTED, "no hiredis"); }
Status RedisClient::send_locked(const std::vector<RedisArgs>&) { return reconnect_locked(); }
Result<RedisReply> RedisClient::read_locked() { return reconnect_locked(); }
Status RedisClient::fail_locked(const std::string&) { return reconnect_locked(); }
Result<std::vector<RedisReply>> RedisClient::pipeline(const std::vector<RedisArgs>&) {
  return reconnect_locked();
}
Result<std::optional<RedisReply>> RedisClient::next_push(std::chrono::milliseconds) {
  return reconnect_locked();
}

#endif

Result<RedisReply> RedisClient::command(const RedisArgs& argv) {
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> r, pipeline({argv}));
  if (r.empty()) return make_error(ErrorCode::IO, "redis at {}: no reply", url_.str());
  if (r[0].type == RedisReply::Type::ERROR)
    return make_error(ErrorCode::IO, "redis: {} ({})", r[0].str, argv.empty() ? "" : argv[0]);
  return std::move(r[0]);
}

Result<RedisReply> RedisClient::transaction(const std::vector<RedisArgs>& cmds) {
  std::vector<RedisArgs> all;
  all.push_back({"MULTI"});
  all.insert(all.end(), cmds.begin(), cmds.end());
  all.push_back({"EXEC"});
  HR_ASSIGN_OR_RETURN(std::vector<RedisReply> r, pipeline(all));
  const RedisReply& exec = r.back();
  if (exec.type != RedisReply::Type::ARRAY) {
    std::string why = exec.str;
    for (const RedisReply& q : r)
      if (q.type == RedisReply::Type::ERROR) why += "; " + q.str;
    return make_error(ErrorCode::IO, "redis: transaction aborted: {}", why);
  }
  return exec;
}

}  // namespace hr
