// The fatal-signal handler: a backtrace with write(2) only, then the default action.
#include "core/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

#include "core/signal_stack.h"

namespace hr {

namespace {

// Note [crash report]: the handler runs on the thread's alternate stack (SA_ONSTACK; a segfault
// may be a stack overflow, Note [alternate signal stacks]), writes with write(2) and
// backtrace_symbols_fd only (no malloc, no stdio), then restores the default action and raises
// the signal again, so the exit status and any core dump are those of the original crash.
// Function names need the executable's symbols exported (-rdynamic).
//
// A stack overflow leaves tens of thousands of frames of one recursion (issue 35: nlohmann's
// serializer), and what matters is who started it, so the whole stack is walked into a static
// buffer and its innermost and outermost kShownFrames are printed with the count between.
constexpr int kShownFrames = 32;
void* g_frames[1 << 18];  // static: the handler must not allocate; 2 MiB, touched only here

void say(const char* s) { (void)!write(STDERR_FILENO, s, std::strlen(s)); }

void say_count(int n) {
  char digits[16];
  int at = sizeof digits;
  digits[--at] = '\0';
  do {
    digits[--at] = char('0' + n % 10);
    n /= 10;
  } while (n > 0 && at > 0);
  say(digits + at);
}

void backtrace_say() {
  const int n = backtrace(g_frames, int(sizeof g_frames / sizeof g_frames[0]));
  if (n <= 2 * kShownFrames) return backtrace_symbols_fd(g_frames, n, STDERR_FILENO);
  backtrace_symbols_fd(g_frames, kShownFrames, STDERR_FILENO);
  say("... ");
  say_count(n - 2 * kShownFrames);
  say(" frames more (a deep recursion?) ...\n");
  backtrace_symbols_fd(g_frames + n - kShownFrames, kShownFrames, STDERR_FILENO);
}

void on_fatal(int sig) {
  say("\nheadroom: fatal signal ");
  say(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  say("; backtrace (innermost first; `addr2line -Cfe headroom ADDR` for lines):\n");
  backtrace_say();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void crash_report_install() {
  signal_stack_install();
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now, not inside the handler
  struct sigaction sa {};
  sa.sa_handler = on_fatal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace hr
