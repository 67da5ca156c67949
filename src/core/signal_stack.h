// The alternate signal stack of each thread headroom starts, so that the fatal-signal report
// (core/crash_report.h) still runs when that thread has overflowed its own stack.
#pragma once

namespace hr {

// Gives the calling thread an alternate signal stack of its own, kept until the thread exits;
// a second call on the same thread does nothing. Every thread headroom starts calls it first
// (Note [alternate signal stacks]).
void signal_stack_install();

}  // namespace hr
