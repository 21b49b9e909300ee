#include "core/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace ratchet {

void fault_point(const std::string& point) {
  static const char* env = std::getenv("RATCHET_FAULT");
  if (!env || !*env) return;
  static std::map<std::string, int> reached;  // how often each point was reached
  const int nth = ++reached[point];
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto at = item.find('@');
    if (at != std::string::npos && item.substr(at + 1) == point) {
      const std::string sig = item.substr(0, at);
      const int num = sig == "USR1" ? SIGUSR1 : sig == "USR2" ? SIGUSR2 : sig == "TERM" ? SIGTERM
                    : sig == "INT" ? SIGINT : 0;
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
  while (std::getline(ss, item, ','))
    if (item == kind + "@" + point) return true;
  return false;
}

}  // namespace ratchet
