// kill -9 mid-queue and restart with nothing lost: `headroom serve` as a subprocess over one
// SQLite database; after the kill, the history is still there and every queued job runs.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "server_client.h"

namespace hr::test {
namespace {

namespace fs = std::filesystem;

// `headroom serve --port 0` in `dir`, its output in `log`; the port it printed, or 0.
class ServeProcess {
 public:
  ServeProcess(const fs::path& dir, const fs::path& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      if (::chdir(dir.c_str()) != 0) ::_exit(127);
      const std::string bin = headroom_binary();
      ::execl(bin.c_str(), bin.c_str(), "serve", "--port", "0", "--device", "cpu", "--threads", "1",
              "--models-dir", "models", "--database", "jobs.sqlite", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    port_ = port_wait(log);
  }
  ~ServeProcess() { kill(SIGKILL); }
  uint16_t port() const { return port_; }
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int st;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

 private:
  // The last "listening on http://127.0.0.1:PORT" line of the log.
  static uint16_t port_wait(const fs::path& log) {
    for (int i = 0; i < 200; ++i) {
      std::ifstream f(log);
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string text = ss.str();
      const size_t at = text.rfind("127.0.0.1:");
      if (at != std::string::npos && text.find(' ', at) != std::string::npos)
        return uint16_t(std::stoi(text.substr(at + 10)));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

std::string submit(uint16_t port, int64_t seed, int steps) {
  HttpResult r = http_post_json(port, "/prompt", Json{{"prompt", tiny_workflow(64, steps, seed)}});
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json().value("prompt_id", "");
}

bool finished(uint16_t port, const std::string& id) {
  const Json h = http_call(port, "GET", "/history/" + id).json();
  return h.is_object() && h.contains(id);
}

bool wait_finished(uint16_t port, const std::vector<std::string>& ids,
                   std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    for (const std::string& id : ids) all = all && finished(port, id);
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(ServerRestart, KillNineMidQueueLosesNothing) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("hr_srv_restart_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  models_folder_make(dir);

  std::string done;
  std::vector<std::string> queued;
  {
    ServeProcess a(dir, dir / "serve-a.log");
    ASSERT_NE(a.port(), 0) << "server did not start; see " << dir / "serve-a.log";
    done = submit(a.port(), 1, 2);
    ASSERT_TRUE(wait_finished(a.port(), {done}, std::chrono::seconds(30)));
    for (int64_t seed = 2; seed < 6; ++seed) queued.push_back(submit(a.port(), seed, 3));
    a.kill(SIGKILL);  // mid-queue: the first of them is running or about to
  }
  ServeProcess b(dir, dir / "serve-b.log");
  ASSERT_NE(b.port(), 0) << "server did not restart; see " << dir / "serve-b.log";
  EXPECT_TRUE(finished(b.port(), done)) << "history lost";
  EXPECT_EQ(http_call(b.port(), "GET", "/history/" + done).json()[done]["status"]["status_str"],
            "success");
  ASSERT_TRUE(wait_finished(b.port(), queued, std::chrono::seconds(60))) << "queued jobs lost";
  for (const std::string& id : queued)
    EXPECT_EQ(http_call(b.port(), "GET", "/history/" + id).json()[id]["status"]["status_str"],
              "success")
        << id;
  EXPECT_EQ(http_call(b.port(), "GET", "/history").json().size(), 5u);
  EXPECT_EQ(http_call(b.port(), "GET", "/queue").json()["queue_pending"].size(), 0u);
  // Numbers continue after the ones the database holds.
  HttpResult r = http_post_json(b.port(), "/prompt", Json{{"prompt", tiny_workflow()}});
  EXPECT_GE(r.json()["number"].get<int64_t>(), 5);
  b.kill(SIGTERM);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hr::test
