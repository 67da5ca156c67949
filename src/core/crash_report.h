// A backtrace on stderr when the process dies of a fatal signal (SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGABRT), so that a crash on a machine without a debugger still says where it was.
#pragma once

namespace hr {

// Installs the report for the whole process and an alternate signal stack for the calling
// thread; other threads get theirs from signal_stack_install (core/signal_stack.h).
void crash_report_install();

}  // namespace hr
