// CPU attention benchmark: the CPU backend's blocked causal attention alone,
// forward and backward, timed by the process's CPU time (user + sys of every
// thread), which a machine shared with other jobs disturbs far less than the
// wall clock. A tool for tuning tiles, not a test.
//
//   bench_attention [-B 1] [-T 1024] [-C 768] [--heads 12] [--kv-heads heads] [--reps 3]
//                   [--threads 1] [--window W] [--softcap-x100 c] [--scale-x1000 s]
//
// GFLOP/s count the causal half only (what a blocked kernel must do):
// forward 2·T²·hs per head (Q·Kᵀ and P·V), backward 5·T²·hs (P recomputed,
// dV, dP, dQ, dK); with a window W, the visible pairs T·W - W(W-1)/2 instead
// of T²/2 (both doubled to keep the T² convention). Best of --reps.
// --window is a sliding window (AttnOpts::window); --softcap-x100 and
// --scale-x1000 give the soft-cap and scale in hundredths / thousandths
// (integer flags, like the rest).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../bench_main.h"
#include "backend/backend.h"
#include "core/rng.h"

using namespace ratchet;

namespace {
double cpu_s() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}
}  // namespace

static int run_main(int argc, char** argv) {
  int B = 1, T = 1024, C = 768, NH = 12, KV = 0, reps = 3, threads = 1;  // KV 0: NH
  AttnOpts opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(a, "-B")) B = v;
    else if (!std::strcmp(a, "-T")) T = v;
    else if (!std::strcmp(a, "-C")) C = v;
    else if (!std::strcmp(a, "--heads")) NH = v;
    else if (!std::strcmp(a, "--kv-heads")) KV = v;
    else if (!std::strcmp(a, "--reps")) reps = v;
    else if (!std::strcmp(a, "--threads")) threads = v;
    else if (!std::strcmp(a, "--window")) opt.window = v;
    else if (!std::strcmp(a, "--softcap-x100")) opt.softcap = v / 100.0f;
    else if (!std::strcmp(a, "--scale-x1000")) opt.scale = v / 1000.0f;
    else {
      std::fprintf(stderr, "usage: bench_attention [-B n] [-T n] [-C n] [--heads n] [--reps n] "
                           "[--kv-heads n] [--threads n] [--window W] [--softcap-x100 c] "
                           "[--scale-x1000 s]\n");
      return 2;
    }
  }
  if (KV == 0) KV = NH;
  if (argc % 2 == 0 || B <= 0 || T <= 0 || NH <= 0 || C % NH != 0 || reps <= 0 || KV <= 0 ||
      NH % KV != 0 || opt.window < 0 || opt.softcap < 0 || opt.scale < 0) {
    std::fprintf(stderr, "bench_attention: need positive -B -T --heads --kv-heads --reps, "
                         "C %% heads == 0 and heads %% kv-heads == 0\n");
    return 2;
  }
  auto be = make_cpu_backend(threads);
  const size_t BT = (size_t)B * T;
  const size_t W = (size_t)(NH + 2 * KV) * (C / NH);  // qkv row: q, k, v heads
  std::vector<float> h_qkv(BT * W), h_d(BT * C);
  Rng rng(3);
  for (auto& x : h_qkv) x = (float)rng.uniform() - 0.5f;
  for (auto& x : h_d) x = (float)rng.uniform() - 0.5f;
  float* qkv = (float*)be->alloc(h_qkv.size() * 4);
  float* out = (float*)be->alloc(BT * C * 4);
  float* dout = (float*)be->alloc(BT * C * 4);
  float* dqkv = (float*)be->alloc(h_qkv.size() * 4);
  void* lse = be->alloc((size_t)B * NH * T * 4);
  be->upload_f32(qkv, h_qkv.data(), h_qkv.size());
  be->upload_f32(dout, h_d.data(), h_d.size());
  double fwd = 1e30, bwd = 1e30;
  for (int r = 0; r < reps + 1; r++) {  // the first run is warm-up
    double t0 = cpu_s();
    be->attention_forward(out, lse, qkv, B, T, C, NH, KV, opt);
    const double t1 = cpu_s();
    be->attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, KV, opt);
    const double t2 = cpu_s();
    if (r > 0) fwd = std::min(fwd, t1 - t0), bwd = std::min(bwd, t2 - t1);
  }
  const double Wd = opt.window > 0 && opt.window < T ? opt.window : T;
  const double pairs = Wd >= T ? (double)T * T / 2 : (double)T * Wd - Wd * (Wd - 1) / 2;
  const double hs = (double)C / NH, base = (double)B * NH * 2 * pairs * hs;
  std::printf("B=%d T=%d C=%d NH=%d KV=%d window=%d threads=%d  fwd %.1f ms %.1f GFLOP/s  bwd %.1f ms "
              "%.1f GFLOP/s (CPU time, visible-pair FLOPs)\n",
              B, T, C, NH, KV, opt.window, threads, fwd * 1e3, 2 * base / fwd / 1e9, bwd * 1e3,
              5 * base / bwd / 1e9);
  return 0;
}

// Uncaught exceptions become exit 2 (bad input) or 1 (bench/bench_main.h).
int main(int argc, char** argv) {
  return ratchet::bench::bench_main("bench_attention", [&] { return run_main(argc, argv); });
}
