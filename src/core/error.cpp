#include "core/error.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace ratchet {

static int g_rank = 0;
void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }

void check_failed(const char* lib, const char* stmt, const char* detail, const char* func,
                  const char* file, int line) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "[ratchet %s error] %s\n  in %s at %s:%d (rank %d, host %s)\n  %s\n", lib,
               detail, func, file, line, g_rank, host, stmt);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ratchet
