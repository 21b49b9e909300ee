#include "train/stop_signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace ratchet {

namespace {

volatile sig_atomic_t g_signal = 0;

void on_stop_signal(int sig) {
  if (sig == SIGINT && g_signal == SIGINT) _exit(130);  // second Ctrl-C: now
  if (g_signal == 0) g_signal = sig;
}

int parse_signal(const std::string& name) {
  std::string n;
  for (char c : name) n += (char)std::toupper((unsigned char)c);
  if (n.rfind("SIG", 0) == 0) n = n.substr(3);
  if (!n.empty() && std::isdigit((unsigned char)n[0])) {
    int v = std::atoi(n.c_str());
    if (v > 0 && v < NSIG && v != SIGKILL && v != SIGSTOP) return v;
  }
  static const struct { const char* name; int sig; } table[] = {
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"INT", SIGINT},
      {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"XCPU", SIGXCPU}, {"ALRM", SIGALRM}};
  for (const auto& e : table)
    if (n == e.name) return e.sig;
  fail("--preempt-signal '", name, "' is not a signal this can catch: use USR1 (the default), "
       "USR2, HUP, XCPU, ... (the name Slurm's --signal uses)");
}

}  // namespace

void install_stop_signals(const std::string& preempt_signal) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and writes continue after the flag is set
  for (int sig : {parse_signal(preempt_signal), (int)SIGTERM, (int)SIGINT})
    sigaction(sig, &sa, nullptr);
  // A file-size limit (ulimit -f, some quota set-ups) then fails the write
  // with EFBIG, reported like a full disk, instead of killing the process.
  signal(SIGXFSZ, SIG_IGN);
}

int stop_signal_received() { return g_signal; }
void clear_stop_signal() { g_signal = 0; }

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace ratchet
