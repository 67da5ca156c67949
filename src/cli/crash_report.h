// A backtrace on stderr when the process dies of a fatal signal (SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGABRT), so that a crash on a machine without a debugger still says where it was.
#pragma once

namespace hr {

void crash_report_install();

}  // namespace hr
