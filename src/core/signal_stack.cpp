// signal_stack_install: one heap stack per thread, registered with sigaltstack(2).
#include "core/signal_stack.h"

#include <signal.h>

#include <algorithm>
#include <memory>

namespace hr {
namespace {

// Note [alternate signal stacks]: a stack overflow is a SIGSEGV delivered on the thread whose
// stack is full, so its handler can run only on an alternate stack (SA_ONSTACK), and an
// alternate stack belongs to one thread: sigaltstack(2) set on the main thread does nothing
// for the HTTP, job runner, telemetry and Redis threads. Without one, the kernel cannot push the
// signal frame and kills the process silently (issue 35's crash left no line in the log).
// The handler's backtrace() and write()s need a few KiB; 64 KiB leaves room for libgcc's
// unwinder, and is at least the system's SIGSTKSZ.
struct ThreadSignalStack {
  std::unique_ptr<char[]> memory;

  void install() {
    if (memory) return;
    const size_t size = std::max<size_t>(64 * 1024, size_t(SIGSTKSZ));
    memory = std::make_unique<char[]>(size);
    stack_t ss{};
    ss.ss_sp = memory.get();
    ss.ss_size = size;
    if (sigaltstack(&ss, nullptr) != 0) memory.reset();
  }
  // The stack is unregistered before it is freed, at the thread's exit.
  ~ThreadSignalStack() {
    if (!memory) return;
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
  }
};

}  // namespace

void signal_stack_install() {
  thread_local ThreadSignalStack stack;
  stack.install();
}

}  // namespace hr
