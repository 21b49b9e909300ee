#include "data_tools/interrupt.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ratchet {

namespace {
volatile sig_atomic_t g_signal = 0;
void record(int s) {
  if (!g_signal) g_signal = s;
}
}  // namespace

Interrupted::Interrupted(int s)
    : std::runtime_error(std::string("interrupted by ") + (s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : s == SIGHUP ? "SIGHUP" : "a signal")),
      signo(s) {}

void install_interrupt_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = record;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);
}

void throw_if_interrupted() {
  if (g_signal) throw Interrupted(g_signal);
}

void die_of(const Interrupted& e) {
  std::fflush(stdout);
  std::fflush(stderr);
  signal(e.signo, SIG_DFL);
  raise(e.signo);
  std::_Exit(128 + e.signo);  // if the signal was blocked
}

}  // namespace ratchet
