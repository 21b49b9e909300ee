#include "core/error.h"
#include "core/fatal_record_hook.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace ratchet {

namespace {
int g_rank = 0, g_world = 1;
int (*g_device_probe)() = nullptr;
void (*g_fatal_hook)() = nullptr;
void (*g_fatal_record_hook)(const char*, const char*) = nullptr;

std::string host_name() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  return host;
}
}  // namespace

void set_log_rank(int rank, int world) {
  g_rank = rank;
  g_world = world;
}
int log_rank() { return g_rank; }
void set_device_probe(int (*probe)()) { g_device_probe = probe; }
void set_fatal_hook(void (*hook)()) { g_fatal_hook = hook; }
void set_fatal_record_hook(void (*hook)(const char*, const char*)) { g_fatal_record_hook = hook; }

std::string where_am_i() {
  std::string s = "rank " + std::to_string(g_rank) + " of " + std::to_string(g_world) +
                  ", host " + host_name();
  if (g_device_probe) {
    const int dev = g_device_probe();
    if (dev >= 0) s += ", device " + std::to_string(dev);
  }
  return s;
}

void check_failed(const char* lib, const char* stmt, const std::string& detail, const char* func,
                  const char* file, int line) {
  std::fprintf(stderr, "[ratchet %s error] %s\n  in %s at %s:%d (%s)\n  %s\n", lib,
               detail.c_str(), func, file, line, where_am_i().c_str(), stmt);
  std::fflush(stderr);
  if (g_fatal_record_hook) g_fatal_record_hook(lib, detail.c_str());
  if (g_fatal_hook) g_fatal_hook();  // a dead rank ends an mpirun/srun job
  std::abort();
}

void report_rank_error(const char* command, const std::string& what, int exit_code) {
  std::fprintf(stderr, "%s: error on %s: %s\n", command, where_am_i().c_str(), what.c_str());
  std::fprintf(stderr, "%s: rank %d is ending the job (exit code %d)\n", command, g_rank,
               exit_code);
  std::fflush(stderr);
  std::fflush(stdout);
}

}  // namespace ratchet
