#include "core/fault.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>

namespace ratchet {

namespace {
// This process's rank as the launchers give it (mpirun, srun), "0" alone.
std::string own_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return v;
  return "0";
}
}  // namespace

void fault_point(const std::string& point) {
  static const char* env = std::getenv("RATCHET_FAULT");
  if (!env || !*env) return;
  static std::map<std::string, int> reached;  // how often each point was reached
  const int nth = ++reached[point];
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    // "rankR/...": only in the process of that rank (mpirun -x gives every
    // rank the same $RATCHET_FAULT; a test aims at one of them).
    if (item.rfind("rank", 0) == 0 && item.find('/') != std::string::npos) {
      const std::string r = item.substr(4, item.find('/') - 4);
      if (r != own_rank()) continue;
      item = item.substr(item.find('/') + 1);
    }
    const auto at = item.find('@');
    // "SIG@point*N": only the N-th time (scripts/chaos.sh: a hang inside the
    // K-th gather or save of an attempt).
    std::string at_point = at == std::string::npos ? "" : item.substr(at + 1);
    int at_nth = 0;
    if (const auto st = at_point.find('*'); st != std::string::npos) {
      at_nth = std::atoi(at_point.c_str() + st + 1);
      at_point.resize(st);
    }
    if (at != std::string::npos && at_point == point && (at_nth == 0 || at_nth == nth)) {
      const std::string sig = item.substr(0, at);
      if (sig.rfind("SLEEP", 0) == 0) {  // "SLEEPms@point": a stall of that many ms
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(sig.c_str() + 5)));
        continue;
      }
      const int num = sig == "USR1" ? SIGUSR1 : sig == "USR2" ? SIGUSR2 : sig == "TERM" ? SIGTERM
                    : sig == "INT" ? SIGINT : sig == "STOP" ? SIGSTOP
                    // A crash (the fatal record's tests: train/fatal_record.h).
                    : sig == "SEGV" ? SIGSEGV : sig == "BUS" ? SIGBUS : sig == "ABRT" ? SIGABRT : 0;
      if (num) raise(num);
      continue;
    }
    // "POINT*N": only the N-th time the point is reached.
    const auto star = item.find('*');
    if (star != std::string::npos) {
      if (item.substr(0, star) != point || std::atoi(item.c_str() + star + 1) != nth) continue;
      item = point;
    }
    if (item == point) {
      std::fprintf(stderr, "ratchet: RATCHET_FAULT: killing the process at '%s'\n",
                   point.c_str());
      std::fflush(stderr);
      kill(getpid(), SIGKILL);
      pause();
    }
  }
}

bool fault_flag(const std::string& kind, const std::string& point) {
  const char* env = std::getenv("RATCHET_FAULT");
  if (!env || !*env) return false;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.rfind("rank", 0) == 0 && item.find('/') != std::string::npos) {
      if (item.substr(4, item.find('/') - 4) != own_rank()) continue;
      item = item.substr(item.find('/') + 1);
    }
    if (item == kind + "@" + point) return true;
  }
  return false;
}

}  // namespace ratchet
