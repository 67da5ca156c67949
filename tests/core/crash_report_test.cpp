// The fatal-signal report survives a stack overflow: a child process overflows the stack of its
// main thread, or of a thread it starts, and its stderr must hold the report and a backtrace.
#include "core/crash_report.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <string>
#include <thread>

#include "core/signal_stack.h"

namespace hr {
namespace {

volatile int g_depth_limit = INT_MAX;  // volatile: the compiler cannot see the end of the recursion

// 4 KiB a frame, a non-tail call: an 8 MiB stack is gone after ~2,000 calls.
[[gnu::noinline]] int stack_eat(int n) {
  volatile char pad[4096];
  pad[0] = char(n);
  if (n >= g_depth_limit) return pad[0];
  return stack_eat(n + 1) + pad[0];
}

struct ChildEnd {
  int status = 0;
  std::string err;  // the child's stderr
};

// Runs `body` in a forked child with the crash report installed and stderr into a pipe.
template <typename F>
ChildEnd child_run(F body) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    crash_report_install();
    body();
    _exit(0);
  }
  close(fds[1]);
  ChildEnd end;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) end.err.append(buf, size_t(n));
  close(fds[0]);
  waitpid(pid, &end.status, 0);
  return end;
}

void expect_overflow_reported(const ChildEnd& end) {
  ASSERT_TRUE(WIFSIGNALED(end.status)) << "the child did not die of a signal: " << end.status;
  EXPECT_EQ(WTERMSIG(end.status), SIGSEGV);
  EXPECT_NE(end.err.find("headroom: fatal signal SEGV; backtrace"), std::string::npos) << end.err;
  // backtrace_symbols_fd's lines: "file(symbol+0x..)[0x...]", innermost first.
  size_t frames = 0;
  for (size_t at = 0; (at = end.err.find(")[0x", at)) != std::string::npos; ++at) ++frames;
  EXPECT_GE(frames, 3u) << end.err;
  // ~2,000 frames of stack_eat: the innermost and outermost 32 with the count between.
  EXPECT_EQ(frames, 64u) << end.err;
  EXPECT_NE(end.err.find(" frames more (a deep recursion?) ..."), std::string::npos) << end.err;
}

TEST(CrashReport, StackOverflowOnTheMainThreadIsReported) {
  const ChildEnd end = child_run([] {
    const rlimit eight_mib{8 << 20, 8 << 20};  // the main stack may be unlimited here
    setrlimit(RLIMIT_STACK, &eight_mib);
    stack_eat(0);
  });
  expect_overflow_reported(end);
  // The outermost frames reach the process's start: who began the runaway recursion is shown.
  EXPECT_NE(end.err.find("__libc_start"), std::string::npos) << end.err;
}

TEST(CrashReport, StackOverflowOnAThreadWithItsSignalStackIsReported) {
  expect_overflow_reported(child_run([] {
    std::thread t([] {
      signal_stack_install();
      stack_eat(0);
    });
    t.join();
  }));
}

// The control: a thread started without signal_stack_install dies without a word, which is why
// every thread headroom starts installs one (Note [alternate signal stacks]).
TEST(CrashReport, StackOverflowOnAThreadWithoutASignalStackIsSilent) {
  const ChildEnd end = child_run([] {
    std::thread t([] { stack_eat(0); });
    t.join();
  });
  ASSERT_TRUE(WIFSIGNALED(end.status));
  EXPECT_EQ(WTERMSIG(end.status), SIGSEGV);
  EXPECT_EQ(end.err.find("fatal signal"), std::string::npos) << end.err;
}

// A second install on one thread keeps the first stack; threads that end give theirs back.
TEST(CrashReport, SignalStackInstallIsIdempotentPerThread) {
  std::thread t([] {
    signal_stack_install();
    stack_t first{};
    sigaltstack(nullptr, &first);
    signal_stack_install();
    stack_t second{};
    sigaltstack(nullptr, &second);
    EXPECT_EQ(first.ss_flags & SS_DISABLE, 0);
    EXPECT_EQ(first.ss_sp, second.ss_sp);
    EXPECT_GE(first.ss_size, size_t(64 * 1024));
  });
  t.join();
}

}  // namespace
}  // namespace hr
