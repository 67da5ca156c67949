// Separate processes on loopback for the distributed tests: a redis-server of their own on a
// free port in a temporary folder, `headroom serve --queue` fronts and `headroom worker`s, each
// with its log file. redis-server missing is a test failure, never a skip (.ci/install-deps
// installs it).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/server_client.h"
#include "test_paths.h"

extern char** environ;

namespace hr::test {

// A free TCP port on loopback (bound, read, closed: the OS does not hand it out again at once).
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline std::string file_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string which(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin"}) {
    std::filesystem::path p = std::filesystem::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// One child process with stdout and stderr in `log`; killed (SIGKILL) when destroyed.
class Child {
 public:
  Child(std::vector<std::string> argv, std::filesystem::path log,
        std::vector<std::string> env_extra = {})
      : argv_(std::move(argv)), log_(std::move(log)), env_extra_(std::move(env_extra)) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { kill(SIGKILL); }

  bool spawn() {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args, env;
    for (std::string& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    for (char** e = environ; *e; ++e) env.push_back(*e);
    for (std::string& e : env_extra_) env.push_back(e.data());
    env.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    return rc == 0;
  }
  // Whether the process still runs (reaps it when it ended).
  bool alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }
  pid_t pid() const { return pid_; }
  std::string log() const { return file_text(log_); }

 private:
  std::vector<std::string> argv_;
  std::filesystem::path log_;
  std::vector<std::string> env_extra_;
  pid_t pid_ = -1;
};

template <typename F>
bool wait_for(F ok, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ok();
}

// redis-server on 127.0.0.1:<free port>, nothing saved, files in `dir`.
class RedisServer {
 public:
  // Empty on success, else why not (redis-server missing or not answering).
  std::string start(const std::filesystem::path& dir) {
    const std::string bin = which("redis-server");
    if (bin.empty())
      return "redis-server is not installed: run .ci/install-deps (Debian's redis-server)";
    port_ = free_port();
    child_ = std::make_unique<Child>(
        std::vector<std::string>{bin, "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                 "--dir", dir.string(), "--save", "", "--appendonly", "no"},
        dir / "redis.log");
    if (!child_->spawn()) return "cannot start " + bin;
    const bool up = wait_for([&] { return child_->log().find("Ready to accept") != std::string::npos; },
                             std::chrono::seconds(10));
    return up ? "" : "redis-server did not start: " + child_->log();
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
  uint16_t port() const { return port_; }

 private:
  uint16_t port_ = 0;
  std::unique_ptr<Child> child_;
};

// The port a front printed ("listening on http://127.0.0.1:PORT"), or 0.
inline uint16_t front_port(const Child& c) {
  std::smatch m;
  const std::string log = c.log();
  static const std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  return std::regex_search(log, m, re) ? uint16_t(std::stoi(m[1])) : 0;
}

}  // namespace hr::test
