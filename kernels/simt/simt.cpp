// simt runtime: block scheduler (one fiber per CUDA thread), warp collectives,
// barrier and deadlock detection, the OS-thread pool that runs blocks.
// See simt.h for the model.
#include "simt.h"

#include "device_guard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace simt {
namespace ctx = boost::context::detail;

namespace detail {
__thread ThreadCtx* tls_thread = nullptr;
__thread BlockInfo* tls_block = nullptr;
}  // namespace detail

namespace {

using detail::BlockInfo;
using detail::ThreadCtx;
using detail::WarpOp;

constexpr size_t kStackBytes = 64 * 1024;  // per fiber, plus one guard page
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxDynSmem = 227 * 1024;  // sm_90 opt-in maximum

std::atomic<uint64_t> g_seed{0};
std::atomic<int> g_threads{0};

uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::sync: return "__syncwarp";
    case WarpOp::shfl_idx: return "__shfl_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::any: return "__any_sync";
    case WarpOp::all: return "__all_sync";
  }
  return "?";
}

std::string fmt_tid(uint3 t) {
  std::ostringstream os;
  os << "(" << t.x << "," << t.y << "," << t.z << ")";
  return os.str();
}

std::string fmt_mask(unsigned m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", m);
  return buf;
}

enum class St : uint8_t { ready, running, at_barrier, at_warp, finished, failed };

struct Fiber {
  ctx::fcontext_t fc = nullptr;
  ThreadCtx tc{};
  St st = St::ready;
};

// A warp collective in progress: the lanes of `mask` (existing lanes only)
// rendezvous; lanes outside it may run their own collective with a disjoint mask.
struct Group {
  unsigned mask = 0;     // the collective's mask
  unsigned arrived = 0;  // lanes waiting in it
  WarpOp op = WarpOp::sync;
};

struct Warp {
  unsigned exists = 0;  // lanes that exist in this (maybe partial) warp
  int ngroups = 0;
  Group groups[32];
  uint64_t value[32];
  int param[32];
  int width[32];
  uint64_t result[32];
};

struct Launch {
  const char* name;
  dim3 grid, block;
  size_t dyn_smem;
  void (*body)(void*);
  void* arg;
};

// Per OS thread: fiber stacks (reused across blocks and launches), the block
// being run, its scheduler context.
struct Worker {
  std::vector<char*> stacks;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<Fiber*> queue;  // runnable fibers
  std::vector<unsigned char> smem;
  BlockInfo info{};
  const Launch* launch = nullptr;
  ctx::fcontext_t sched = nullptr;
  Fiber* cur = nullptr;
  int nthreads = 0, live = 0, at_barrier = 0;
  uint64_t rng = 0;
  std::string error;  // first failure of the running block

  ~Worker() {
    for (char* s : stacks) munmap(s, kStackBytes + page());
  }
  static size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }
  char* stack(int i) {
    while ((int)stacks.size() <= i) {
      size_t bytes = kStackBytes + page();
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("simt: cannot map a fiber stack");
      mprotect(p, page(), PROT_NONE);  // guard page: a stack overflow faults
      stacks.push_back(static_cast<char*>(p));
    }
    return stacks[i];
  }
  uint64_t next_rand() { return mix64(rng++); }

  void fail(const std::string& what) {
    if (error.empty()) {
      std::ostringstream os;
      os << "kernel " << launch->name << ", block " << fmt_tid(info.block_idx) << ": " << what;
      error = os.str();
    }
  }
  std::string who(const Fiber* f) const { return "thread " + fmt_tid(f->tc.tid); }

  void run_block(const Launch& L, uint3 bid);
  void schedule();
  void diagnose_stall();
  void complete_collective(Warp& w, Group& g);
};

thread_local Worker* tls_worker = nullptr;
Worker& worker() {
  if (!tls_worker) {
    static thread_local Worker w;
    tls_worker = &w;
  }
  return *tls_worker;
}

// Leaves the running fiber for the scheduler; returns when resumed.
void suspend(Worker& w) {
  ctx::transfer_t t = ctx::jump_fcontext(w.sched, nullptr);
  tls_worker->sched = t.fctx;
}

void fiber_entry(ctx::transfer_t t) {
  Worker& w = *tls_worker;
  w.sched = t.fctx;
  Fiber* f = static_cast<Fiber*>(t.data);
  try {
    w.launch->body(w.launch->arg);
    f->st = St::finished;
  } catch (const std::exception& e) {
    w.fail(w.who(f) + " threw: " + e.what());
    f->st = St::failed;
  } catch (...) {
    w.fail(w.who(f) + " threw an unknown exception");
    f->st = St::failed;
  }
  ctx::jump_fcontext(tls_worker->sched, nullptr);  // never resumed
  std::abort();
}

void Worker::run_block(const Launch& L, uint3 bid) {
  launch = &L;
  nthreads = (int)(L.block.x * L.block.y * L.block.z);
  info.block_idx = bid;
  info.block_dim = L.block;
  info.grid_dim = L.grid;
  if (smem.size() < L.dyn_smem + 16) smem.resize(L.dyn_smem + 16);
  // 16-byte aligned, poisoned: reading shared memory nobody wrote gives NaN.
  auto base = reinterpret_cast<uintptr_t>(smem.data());
  info.dyn_smem = reinterpret_cast<void*>((base + 15) & ~uintptr_t(15));
  info.dyn_smem_bytes = L.dyn_smem;
  std::memset(info.dyn_smem, 0xFF, L.dyn_smem);
  detail::tls_block = &info;
  error.clear();
  uint64_t lin_block = bid.x + (uint64_t)L.grid.x * (bid.y + (uint64_t)L.grid.y * bid.z);
  rng = mix64(g_seed.load() ^ mix64(lin_block + 0x51D7));

  fibers.assign(nthreads, Fiber{});
  int nwarps = (nthreads + 31) / 32;
  warps.resize(nwarps);
  for (int i = 0; i < nwarps; i++) {
    int n = std::min(32, nthreads - 32 * i);
    warps[i].exists = n == 32 ? 0xffffffffu : ((1u << n) - 1);
    warps[i].ngroups = 0;
  }
  queue.clear();
  for (int i = 0; i < nthreads; i++) {
    Fiber& f = fibers[i];
    unsigned x = i % L.block.x, y = (i / L.block.x) % L.block.y, z = i / (L.block.x * L.block.y);
    f.tc.tid = make_uint3(x, y, z);
    f.tc.lane = i % 32;
    f.tc.warp = i / 32;
    f.tc.block = nullptr;
    char* s = stack(i);
    f.fc = ctx::make_fcontext(s + kStackBytes + page(), kStackBytes, fiber_entry);
    f.st = St::ready;
    queue.push_back(&f);
  }
  live = nthreads;
  at_barrier = 0;
  schedule();
  detail::tls_block = nullptr;
  detail::tls_thread = nullptr;
}

void Worker::schedule() {
  for (;;) {
    while (!queue.empty() && error.empty()) {
      size_t k = (size_t)(((__uint128_t)next_rand() * queue.size()) >> 64);
      Fiber* f = queue[k];
      queue[k] = queue.back();
      queue.pop_back();
      f->st = St::running;
      cur = f;
      detail::tls_thread = &f->tc;
      ctx::transfer_t t = ctx::jump_fcontext(f->fc, f);
      f->fc = t.fctx;
      cur = nullptr;
      if (f->st == St::finished || f->st == St::failed) live--;
    }
    if (!error.empty()) return;  // abandoned fibers' stacks are simply reused
    if (live == 0) return;
    if (at_barrier == live && live == nthreads) {  // release the barrier
      at_barrier = 0;
      for (Fiber& f : fibers) {
        f.st = St::ready;
        queue.push_back(&f);
      }
      continue;
    }
    diagnose_stall();
    return;
  }
}

// Nothing can run and the barrier cannot open: explain why.
void Worker::diagnose_stall() {
  int finished = 0, at_warp = 0;
  const Fiber* first_done = nullptr;
  const Fiber* first_bar = nullptr;
  const Fiber* first_warp = nullptr;
  for (const Fiber& f : fibers) {
    if (f.st == St::finished) {
      finished++;
      if (!first_done) first_done = &f;
    } else if (f.st == St::at_barrier) {
      if (!first_bar) first_bar = &f;
    } else if (f.st == St::at_warp) {
      at_warp++;
      if (!first_warp) first_warp = &f;
    }
  }
  std::ostringstream os;
  if (first_warp) {
    const Warp& w = warps[first_warp->tc.warp];
    const Group* g = &w.groups[0];
    for (int i = 0; i < w.ngroups; i++)
      if ((w.groups[i].mask >> first_warp->tc.lane) & 1u) g = &w.groups[i];
    unsigned missing = g->mask & ~g->arrived;
    int lane = __builtin_ctz(missing ? missing : 1);
    const Fiber& m = fibers[first_warp->tc.warp * 32 + lane];
    os << op_name(g->op) << " with mask " << fmt_mask(g->mask) << " in warp "
       << first_warp->tc.warp << " never completes: lanes " << fmt_mask(g->arrived)
       << " arrived, lane " << lane << " ("
       << who(&m) << ") "
       << (m.st == St::finished     ? "has exited"
           : m.st == St::at_barrier ? "waits at __syncthreads"
                                    : "waits in a different warp collective");
  } else {
    os << "__syncthreads reached by " << at_barrier << " of " << nthreads << " threads (first "
       << (first_bar ? who(first_bar) : std::string("?")) << "); " << finished
       << " threads exited without reaching it (first "
       << (first_done ? who(first_done) : std::string("?")) << ")";
  }
  (void)at_warp;
  fail(os.str());
}

void Worker::complete_collective(Warp& w, Group& g) {
  unsigned m = g.mask;
  const WarpOp op = g.op;
  uint64_t acc_or = 0, acc_and = 1;
  unsigned ballot = 0;
  for (unsigned b = m; b; b &= b - 1) {
    int l = __builtin_ctz(b);
    acc_or |= w.value[l];
    acc_and &= w.value[l];
    if (w.value[l]) ballot |= 1u << l;
  }
  for (unsigned b = m; b; b &= b - 1) {
    int lane = __builtin_ctz(b);
    uint64_t r = 0;
    switch (op) {
      case WarpOp::sync: break;
      case WarpOp::ballot: r = ballot; break;
      case WarpOp::any: r = acc_or != 0; break;
      case WarpOp::all: r = acc_and != 0; break;
      default: {
        // PTX shfl.sync: c = ((32 - width) << 8) | clamp, clamp 0 for up, 31 otherwise.
        int width = w.width[lane];
        int segmask = (32 - width) & 31;
        int cval = op == WarpOp::shfl_up ? 0 : 31;
        int bval = w.param[lane] & 31;
        int max_lane = (lane & segmask) | (cval & ~segmask);
        int min_lane = lane & segmask;
        int j = lane;
        bool ok = false;
        switch (op) {
          case WarpOp::shfl_up: j = lane - bval; ok = j >= max_lane; break;
          case WarpOp::shfl_down: j = lane + bval; ok = j <= max_lane; break;
          case WarpOp::shfl_xor: j = lane ^ bval; ok = j <= max_lane; break;
          case WarpOp::shfl_idx: j = min_lane | (bval & ~segmask); ok = j <= max_lane; break;
          default: break;
        }
        if (!ok) j = lane;
        if (!((m >> j) & 1u)) {
          const Fiber& f = fibers[(int)(&w - warps.data()) * 32 + lane];
          fail(who(&f) + ": " + op_name(op) + " with mask " + fmt_mask(m) + " reads lane " +
               std::to_string(j) +
               ((w.exists >> j) & 1u ? ", which is not in the mask (undefined value)"
                                     : ", which does not exist in this warp"));
          return;
        }
        r = w.value[j];
      }
    }
    w.result[lane] = r;
  }
  int base = (int)(&w - warps.data()) * 32;
  for (unsigned b = m; b; b &= b - 1) {
    Fiber& f = fibers[base + __builtin_ctz(b)];
    if (&f != cur) {
      f.st = St::ready;
      queue.push_back(&f);
    }
  }
  g = w.groups[--w.ngroups];  // remove the group (swap with the last)
}

// ---- the OS-thread pool ---------------------------------------------------------------
struct Pool {
  std::mutex launch_mu;  // one launch at a time
  std::mutex mu;
  std::condition_variable cv, done_cv;
  std::vector<std::thread> threads;
  uint64_t generation = 0;
  int busy = 0;
  std::function<void()> job;
  bool stop = false;

  void ensure(int n) {  // n helper threads besides the caller
    std::lock_guard<std::mutex> lk(mu);
    // A new thread must wait for the NEXT job, not run the previous one (whose
    // closure refers to a launch that has returned).
    while ((int)threads.size() < n) threads.emplace_back([this, g = generation] { loop(g); });
  }
  void loop(uint64_t seen) {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stop || generation != seen; });
      if (stop) return;
      seen = generation;
      auto fn = job;
      lk.unlock();
      fn();
      lk.lock();
      if (--busy == 0) done_cv.notify_all();
    }
  }
  // Runs fn on `helpers` pool threads and the caller; returns when all are done.
  void run(int helpers, const std::function<void()>& fn) {
    if (helpers <= 0) {
      fn();
      return;
    }
    ensure(helpers);
    {
      std::lock_guard<std::mutex> lk(mu);
      job = fn;
      busy = (int)threads.size();
      generation++;
    }
    cv.notify_all();
    fn();
    std::unique_lock<std::mutex> lk(mu);
    done_cv.wait(lk, [&] { return busy == 0; });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  }
};

Pool& pool() {
  static Pool p;
  return p;
}

std::mutex g_err_mu;
cudaError_t g_err = cudaSuccess;
std::string g_err_msg;

void record_error(const std::string& msg) {
  std::lock_guard<std::mutex> lk(g_err_mu);
  if (g_err == cudaSuccess) {
    g_err = cudaErrorLaunchFailure;
    g_err_msg = msg;
  }
}

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* s = std::getenv(name);
  if (!s || !*s) return dflt;
  return std::strtoull(s, nullptr, 0);
}

}  // namespace

// ---- device-side entry points ------------------------------------------------------
namespace detail {

void syncthreads() {
  Worker& w = *tls_worker;
  Fiber* f = w.cur;
  f->st = St::at_barrier;
  w.at_barrier++;
  suspend(w);
}

[[noreturn]] void device_fail(const std::string& what) {
  Worker& w = *tls_worker;
  Fiber* f = w.cur;
  w.fail(w.who(f) + ": " + what);
  f->st = St::failed;
  ctx::jump_fcontext(w.sched, nullptr);  // never resumed
  std::abort();
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width) {
  Worker& w = *tls_worker;
  Fiber* f = w.cur;
  Warp& wp = w.warps[f->tc.warp];
  int lane = f->tc.lane;
  if (!((mask >> lane) & 1u))
    device_fail(std::string(op_name(op)) + " with mask " + fmt_mask(mask) +
                " called by lane " + std::to_string(lane) + ", which is not in the mask");
  if (op != WarpOp::sync && (width < 1 || width > 32 || (width & (width - 1))))
    device_fail(std::string(op_name(op)) + " with width " + std::to_string(width) +
                " (must be a power of two in [1, 32])");
  unsigned m = mask & wp.exists;
  // Join the pending collective with this exact mask, or start one. A lane
  // awaited by another pending collective that calls a different one means
  // the lanes disagree on the sequence of collectives (a hang on a GPU).
  Group* g = nullptr;
  for (int i = 0; i < wp.ngroups; i++) {
    Group& q = wp.groups[i];
    if (q.mask == m && q.op == op) {
      g = &q;
      break;
    }
    if ((q.mask >> lane) & 1u)
      device_fail(std::string(op_name(op)) + " with mask " + fmt_mask(mask) + " called by lane " +
                  std::to_string(lane) + " while lanes " + fmt_mask(q.arrived) + " wait for it in " +
                  op_name(q.op) + " with mask " + fmt_mask(q.mask) +
                  " (lanes disagree on the warp collective)");
  }
  if (!g) {
    g = &wp.groups[wp.ngroups++];
    g->op = op;
    g->mask = m;
    g->arrived = 0;
  }
  wp.value[lane] = value;
  wp.param[lane] = param;
  wp.width[lane] = width;
  g->arrived |= 1u << lane;
  if (g->arrived == g->mask) {
    w.complete_collective(wp, *g);
    if (!w.error.empty()) {
      f->st = St::failed;
      ctx::jump_fcontext(w.sched, nullptr);
      std::abort();
    }
    // Give the other lanes a chance to run first: order is what we test.
    f->st = St::ready;
    w.queue.push_back(f);
    suspend(w);
  } else {
    f->st = St::at_warp;
    suspend(w);
  }
  return wp.result[lane];
}

}  // namespace detail

// ---- host API --------------------------------------------------------------------------
void set_seed(uint64_t s) { g_seed = s; }
uint64_t seed() { return g_seed.load(); }
void set_threads(int n) { g_threads = n; }
int threads() {
  int n = g_threads.load();
  if (n > 0) return n;
  n = (int)env_u64("RATCHET_SIMT_THREADS", 0);
  if (n <= 0) n = std::min(8, (int)std::max(1u, std::thread::hardware_concurrency()));
  return n;
}

cudaError_t peek_last_error() {
  std::lock_guard<std::mutex> lk(g_err_mu);
  return g_err;
}
cudaError_t get_last_error() {
  std::lock_guard<std::mutex> lk(g_err_mu);
  cudaError_t e = g_err;
  g_err = cudaSuccess;
  return e;
}
const std::string& last_error_message() { return g_err_msg; }

void check_launch(const char* file, int line) {
  std::string msg;
  {
    std::lock_guard<std::mutex> lk(g_err_mu);
    if (g_err == cudaSuccess) return;
    g_err = cudaSuccess;
    msg = g_err_msg;
  }
  throw LaunchError("simt launch failed at " + std::string(file) + ":" + std::to_string(line) +
                    ": " + msg);
}

cudaError_t launch_erased(const char* name, dim3 grid, dim3 block, size_t dyn_smem,
                          void (*body)(void*), void* arg) {
  static std::once_flag seeded;
  std::call_once(seeded, [] {
    if (g_seed.load() == 0) g_seed = env_u64("RATCHET_SIMT_SEED", 1);
  });
  uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
  uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
  std::string bad;
  if (nthreads == 0 || nthreads > kMaxThreadsPerBlock || block.z > 64)
    bad = "invalid block " + fmt_tid(make_uint3(block.x, block.y, block.z)) +
          " (1..1024 threads, z <= 64)";
  else if (nblocks == 0 || grid.y > 65535 || grid.z > 65535)
    bad = "invalid grid " + fmt_tid(make_uint3(grid.x, grid.y, grid.z));
  else if (dyn_smem > kMaxDynSmem)
    bad = "dynamic shared memory of " + std::to_string(dyn_smem) + " bytes exceeds the maximum";
  if (!bad.empty()) {
    record_error(std::string("kernel ") + name + ": " + bad);
    return cudaErrorLaunchFailure;
  }
  Launch L{name, grid, block, dyn_smem, body, arg};
  std::lock_guard<std::mutex> launch_lock(pool().launch_mu);
  DeviceAccess device_memory;  // the kernel may touch it (device_guard.h)
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  auto run = [&] {
    Worker& w = worker();
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      uint64_t b = next.fetch_add(1);
      if (b >= nblocks) return;
      uint3 bid = make_uint3((unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y),
                             (unsigned)(b / ((uint64_t)grid.x * grid.y)));
      w.run_block(L, bid);
      if (!w.error.empty()) {
        record_error(w.error);
        failed = true;
        return;
      }
    }
  };
  int helpers = (int)std::min<uint64_t>(threads(), nblocks) - 1;
  pool().run(helpers, run);
  return failed ? cudaErrorLaunchFailure : cudaSuccess;
}

}  // namespace simt
