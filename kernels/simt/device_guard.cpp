// See device_guard.h.
#include "device_guard.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace simt {
namespace {

std::atomic<int> g_mode{-1};  // -1: not decided yet (env), 0 off, 1 on
std::mutex g_mu;
std::map<uintptr_t, size_t> g_regions;  // base -> mapped length (guard on only)
int g_depth = 0;                        // DeviceAccess scopes alive, all threads
struct sigaction g_old_segv;

size_t page_size() {
  static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
  return p;
}

void protect_all(int prot) {
  for (auto& [base, len] : g_regions)
    if (mprotect((void*)base, len, prot) != 0) {
      std::perror("simt device guard: mprotect");
      std::abort();
    }
}

// Async-signal-safe output: write(2) of a string and of a number in hex.
void say(const char* s) {
  ssize_t r = write(2, s, std::strlen(s));
  (void)r;
}
void say_hex(uintptr_t v) {
  char b[2 + 16 + 1];
  int i = (int)sizeof b - 1;
  b[i] = 0;
  do {
    b[--i] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v && i > 2);
  b[--i] = 'x';
  b[--i] = '0';
  say(b + i);
}

// A fault inside a guarded allocation is the bug the guard is for: say so,
// with a backtrace, then let the default action kill the process (the fault
// repeats once the handler returns). Other faults go to the previous handler.
void on_segv(int sig, siginfo_t* si, void* uc) {
  const uintptr_t a = (uintptr_t)si->si_addr;
  auto it = g_regions.upper_bound(a);  // read without the lock: the process is dying
  if (it != g_regions.begin() && a < std::prev(it)->first + std::prev(it)->second) {
    say("\nsimt device guard (RATCHET_SIMT_GUARD=1): the host touched device memory at ");
    say_hex(a);
    say(" (allocation ");
    say_hex(std::prev(it)->first);
    say(") outside a kernel launch or device copy. On a GPU this access segfaults: use "
        "Backend::copy/upload/download or a kernel. Backtrace:\n");
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    signal(SIGSEGV, SIG_DFL);
    return;
  }
  if (g_old_segv.sa_flags & SA_SIGINFO) {
    if (g_old_segv.sa_sigaction) return g_old_segv.sa_sigaction(sig, si, uc);
  } else if (g_old_segv.sa_handler != SIG_DFL && g_old_segv.sa_handler != SIG_IGN) {
    return g_old_segv.sa_handler(sig);
  }
  signal(SIGSEGV, SIG_DFL);
}

void install_handler() {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now: backtrace() in the handler must not allocate
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
}

}  // namespace

bool guard_enabled() {
  int m = g_mode.load();
  if (m < 0) {
    const char* e = std::getenv("RATCHET_SIMT_GUARD");
    int want = e && *e && std::strcmp(e, "0") != 0 ? 1 : 0;
    g_mode.compare_exchange_strong(m, want);
    m = g_mode.load();
  }
  return m == 1;
}

void set_guard(bool on) { g_mode = on ? 1 : 0; }

void* device_alloc(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  if (!guard_enabled()) return std::aligned_alloc(256, rounded);
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  const size_t len = (rounded + page_size() - 1) / page_size() * page_size();
  std::lock_guard<std::mutex> lk(g_mu);
  void* p = mmap(nullptr, len, g_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  g_regions[(uintptr_t)p] = len;
  return p;
}

void device_free(void* p) {
  if (!p) return;
  {
    // Looked up whatever the mode now: a test may turn the guard off while
    // guarded allocations live.
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_regions.find((uintptr_t)p);
    if (it != g_regions.end()) {
      munmap(p, it->second);
      g_regions.erase(it);
      return;
    }
  }
  std::free(p);
}

DeviceAccess::DeviceAccess() : on_(guard_enabled()) {
  if (!on_) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  if (!on_) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (--g_depth == 0) protect_all(PROT_NONE);
}

}  // namespace simt
