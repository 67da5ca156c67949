// How `serve` and `worker` wait for SIGINT/SIGTERM (Note [signals before threads]).
#pragma once

#include <csignal>

namespace hr {

// Note [signals before threads]: SIGINT/SIGTERM are blocked before any thread starts (threads
// inherit the mask), so only stop_signal_wait receives them and shutdown runs on the calling
// thread. SIGPIPE is ignored (a client that goes away must not kill the process).
sigset_t stop_signals_block();
// Waits for one of `set`'s signals and returns it.
int stop_signal_wait(const sigset_t& set);

}  // namespace hr
