// Ctrl-C (SIGINT), SIGTERM and SIGHUP while `ratchet shard` runs. Before, the
// process died where it stood and left what it was making: the spool of a
// pipe (as large as the pipe had carried, in --output-dir), temporary and
// finished shards of a run that never completed. Now the handler only records
// the signal; the reading loop (text_stream.cpp, both passes) sees it after its
// next read and throws Interrupted, so that unwinding removes what the run made,
// as for any other failure; cmd_shard then ends by the same signal (status
// 128 + N, what the shell and Slurm expect of a killed tool).
#pragma once
#include <stdexcept>

namespace ratchet {

class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signo);
  int signo;
};

// SIGINT, SIGTERM and SIGHUP record themselves, without SA_RESTART: a read()
// blocked on an idle pipe returns (EINTR) and the loop sees the signal.
void install_interrupt_handlers();
// Throws Interrupted once one of them has arrived (never before
// install_interrupt_handlers).
void throw_if_interrupted();
// After cleaning up: the default action for the signal, raised again.
[[noreturn]] void die_of(const Interrupted& e);

}  // namespace ratchet
