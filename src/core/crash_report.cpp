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
void say(const char* s) { (void)!write(STDERR_FILENO, s, std::strlen(s)); }

void on_fatal(int sig) {
  say("\nheadroom: fatal signal ");
  say(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  say("; backtrace (innermost first; `addr2line -Cfe headroom ADDR` for lines):\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
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
