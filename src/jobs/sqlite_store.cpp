// JobStore on SQLite: tables `pending` (one row per queued or running job) and `history` (one
// row per finished job, its ComfyUI history entry as JSON text).
#include "jobs/sqlite_store.h"

#include <sqlite3.h>

#include <mutex>

#include "core/json_parse.h"

namespace hr {
namespace {

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalize>;

// Note [sqlite durability]: WAL with synchronous=NORMAL makes every committed transaction
// survive a killed process (the WAL is in the OS's page cache); only a power loss may drop the
// last transactions, which is acceptable for a queue of prompts. busy_timeout covers a second
// process (a restart racing the old one's exit) opening the same file.
constexpr const char* kSchema = R"sql(
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
PRAGMA busy_timeout=5000;
CREATE TABLE IF NOT EXISTS pending(
  prompt_id TEXT PRIMARY KEY, number INTEGER NOT NULL, seq INTEGER NOT NULL,
  prompt TEXT NOT NULL, extra_data TEXT NOT NULL, outputs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS history(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, prompt_id TEXT UNIQUE NOT NULL, entry TEXT NOT NULL);
)sql";

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  Status pending_put(const Job& j) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s = prepare(
        "INSERT OR REPLACE INTO pending(prompt_id, number, seq, prompt, extra_data, outputs) "
        "VALUES(?, ?, ?, ?, ?, ?)");
    if (!s) return error("prepare");
    bind_text(s.get(), 1, j.prompt_id);
    sqlite3_bind_int64(s.get(), 2, j.number);
    sqlite3_bind_int64(s.get(), 3, int64_t(j.seq));
    bind_text(s.get(), 4, j.prompt.dump());
    bind_text(s.get(), 5, j.extra_data.dump());
    bind_text(s.get(), 6, Json(j.outputs).dump());
    return step_done(s.get(), "pending_put");
  }
  Status pending_erase(const std::string& id) override {
    return exec_with_id("DELETE FROM pending WHERE prompt_id = ?", id);
  }
  Status pending_clear() override { return exec("DELETE FROM pending"); }

  Status history_put(const JobRecord& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    HR_TRY(exec_locked("BEGIN IMMEDIATE"));
    Status st = history_put_locked(r);
    if (!st.ok()) {
      (void)exec_locked("ROLLBACK");
      return st;
    }
    return exec_locked("COMMIT");
  }
  Status history_erase(const std::string& id) override {
    return exec_with_id("DELETE FROM history WHERE prompt_id = ?", id);
  }
  Status history_clear() override { return exec("DELETE FROM history"); }

  Result<std::vector<Job>> pending_load() override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s = prepare("SELECT prompt_id, number, seq, prompt, extra_data, outputs FROM pending");
    if (!s) return error("prepare");
    std::vector<Job> jobs;
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      Job j;
      j.prompt_id = column_text(s.get(), 0);
      j.number = sqlite3_column_int64(s.get(), 1);
      j.seq = uint64_t(sqlite3_column_int64(s.get(), 2));
      Result<Json> prompt = json_parse(column_text(s.get(), 3), kJsonStoredMaxDepth);
      Result<Json> extra = json_parse(column_text(s.get(), 4), kJsonStoredMaxDepth);
      Result<Json> outputs = json_parse(column_text(s.get(), 5), kJsonStoredMaxDepth);
      if (!prompt.ok() || !extra.ok() || !outputs.ok() || !outputs->is_array())
        return make_error(ErrorCode::CORRUPT, "{}: pending job {} is not valid JSON", path_,
                          j.prompt_id);
      j.prompt = std::move(prompt).value();
      j.extra_data = std::move(extra).value();
      for (const Json& o : *outputs)
        if (o.is_string()) j.outputs.push_back(o.get<std::string>());
      jobs.push_back(std::move(j));
    }
    if (rc != SQLITE_DONE) return error("pending_load");
    return jobs;
  }

  Result<std::vector<JobRecord>> history_load() override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s = prepare("SELECT prompt_id, entry FROM history ORDER BY seq");
    if (!s) return error("prepare");
    std::vector<JobRecord> records;
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      JobRecord r;
      r.prompt_id = column_text(s.get(), 0);
      Result<Json> entry = json_parse(column_text(s.get(), 1), kJsonStoredMaxDepth);
      if (!entry.ok())
        return make_error(ErrorCode::CORRUPT, "{}: history entry {}: {}", path_, r.prompt_id,
                          entry.status().message());
      r.entry = std::move(entry).value();
      records.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return error("history_load");
    return records;
  }

 private:
  Status history_put_locked(const JobRecord& r) {
    // A re-run under the same prompt_id moves to the end of history, as a new dict key would.
    Stmt del = prepare("DELETE FROM history WHERE prompt_id = ?");
    Stmt ins = prepare("INSERT INTO history(prompt_id, entry) VALUES(?, ?)");
    Stmt pend = prepare("DELETE FROM pending WHERE prompt_id = ?");
    if (!del || !ins || !pend) return error("prepare");
    bind_text(del.get(), 1, r.prompt_id);
    HR_TRY(step_done(del.get(), "history_put"));
    bind_text(ins.get(), 1, r.prompt_id);
    bind_text(ins.get(), 2, r.entry.dump());
    HR_TRY(step_done(ins.get(), "history_put"));
    bind_text(pend.get(), 1, r.prompt_id);
    return step_done(pend.get(), "history_put");
  }

  Stmt prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_.get(), sql, -1, &s, nullptr) != SQLITE_OK) return Stmt();
    return Stmt(s);
  }
  static void bind_text(sqlite3_stmt* s, int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
  }
  static std::string column_text(sqlite3_stmt* s, int i) {
    const unsigned char* t = sqlite3_column_text(s, i);
    return t ? std::string(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(s, i)))
             : std::string();
  }
  Status step_done(sqlite3_stmt* s, const char* what) {
    return sqlite3_step(s) == SQLITE_DONE ? Status() : error(what);
  }
  Status exec(const char* sql) {
    std::lock_guard<std::mutex> lock(mu_);
    return exec_locked(sql);
  }
  Status exec_locked(const char* sql) {
    return sqlite3_exec(db_.get(), sql, nullptr, nullptr, nullptr) == SQLITE_OK ? Status()
                                                                                : error(sql);
  }
  Status exec_with_id(const char* sql, const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s = prepare(sql);
    if (!s) return error("prepare");
    bind_text(s.get(), 1, id);
    return step_done(s.get(), sql);
  }
  Status error(const char* what) const {
    return make_error(ErrorCode::IO, "{}: {}: {}", path_, what, sqlite3_errmsg(db_.get()));
  }

  std::mutex mu_;
  std::unique_ptr<sqlite3, DbClose> db_;
  std::string path_;
};

}  // namespace

Result<std::unique_ptr<JobStore>> job_store_sqlite(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  std::unique_ptr<sqlite3, DbClose> db(raw);
  if (rc != SQLITE_OK)
    return make_error(ErrorCode::IO, "cannot open job database {}: {}", path,
                      raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
  char* err = nullptr;
  if (sqlite3_exec(db.get(), kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return make_error(ErrorCode::IO, "job database {}: {}", path, msg);
  }
  return std::unique_ptr<JobStore>(std::make_unique<SqliteJobStore>(db.release(), path));
}

}  // namespace hr
