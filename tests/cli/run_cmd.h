// Runs a shell command for the CLI tests and keeps its exit code and output (stdout, and
// stderr unless `stdout_only`, e.g. for parsing --json output); file_read reads back what a
// command wrote to a file (its stderr redirected there, to be checked apart from stdout).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace hr::test {

struct CmdResult {
  int code = -1;
  std::string output;
};

inline CmdResult run_cmd(const std::string& cmd, bool stdout_only = false) {
  CmdResult r;
  FILE* p = popen((cmd + (stdout_only ? " 2>/dev/null" : " 2>&1")).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

inline std::string file_read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace hr::test
