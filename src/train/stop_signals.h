// Signals that ask a run to stop: the handlers only set a flag; the training
// loop looks at it at the next step boundary, saves a checkpoint and exits
// with kExitRequeue. A signal that arrives during a save just sets the flag
// again: the save finishes.
//   - the preemption signal (--preempt-signal, default USR1): Slurm's
//     `--signal` warning or `scancel --signal`
//   - SIGTERM, always: what Slurm sends at the time limit, on preemption and
//     on `scontrol requeue`, followed by SIGKILL after KillWait
//   - SIGINT (Ctrl-C): the same; a second Ctrl-C exits at once
#pragma once
#include <string>

namespace ratchet {

// Installs the handlers (process-wide; call once). Throws Error naming
// --preempt-signal for an unknown signal name ("USR1", "SIGUSR2", "10", ...).
void install_stop_signals(const std::string& preempt_signal);
// The number of the first stop signal received, or 0.
int stop_signal_received();
// "SIGUSR1" etc. for messages.
std::string signal_name(int sig);
// Test hook: forget a received signal.
void clear_stop_signal();

}  // namespace ratchet
