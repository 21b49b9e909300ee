// One MoE layer's forward + backward on the CPU backend (src/moe: router,
// dropless dispatch, packed SwiGLU experts through OpenBLAS, combine), on
// random N tokens: the figure bench/cpu/moe.sh compares with PyTorch eager
// looping over the experts (bench/cpu/pytorch_moe.py, the same shape).
//
//   bench_moe_layer [-N tokens] [-C channels] [-E experts] [-k top] [-I hidden]
//                   [--reps n] [--warmup n] [--threads n] [--json]
//
// Weights N(0, 0.02) with a wider gate (std 1) so routing is far from uniform
// ties; the timed region is moe_forward + moe_backward (parameter gradients
// accumulate, as in training). cpu_ms: the process's user+sys per rep (all
// threads), steadier than wall time on a shared machine.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "backend/cpu/cpu_backend.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/log.h"
#include "moe/moe_ops.h"

using namespace ratchet;

namespace {
double cpu_s() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}
}  // namespace

static int run_main(int argc, char** argv) {
  int N = 2048, C = 512, E = 8, k = 2, I = 512, reps = 5, warmup = 1, threads = 1;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--json")) {
      json = true;
      continue;
    }
    if (i + 1 >= argc) fail("bench_moe_layer: ", a, " needs a value");
    const std::string val = argv[++i];
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(val, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != val.size()) fail("bench_moe_layer: ", a, " '", val, "' is not an integer");
    if (!std::strcmp(a, "-N")) N = v;
    else if (!std::strcmp(a, "-C")) C = v;
    else if (!std::strcmp(a, "-E")) E = v;
    else if (!std::strcmp(a, "-k")) k = v;
    else if (!std::strcmp(a, "-I")) I = v;
    else if (!std::strcmp(a, "--reps")) reps = v;
    else if (!std::strcmp(a, "--warmup")) warmup = v;
    else if (!std::strcmp(a, "--threads")) threads = v;
    else
      fail("usage: bench_moe_layer [-N tokens] [-C channels] [-E experts] [-k top] [-I hidden] "
           "[--reps n] [--warmup n] [--threads n] [--json] (unknown ", a, ")");
  }
  if (reps < 1 || warmup < 0) fail("--reps must be >= 1 and --warmup >= 0");
  moe::MoeShape s;
  s.N = N, s.C = C, s.E = E, s.k = k, s.I = I, s.norm_topk_prob = true;
  moe::check_shape(s);
  CpuBackend be(threads);
  Rng rng(5);
  auto fill = [&](std::vector<float>& v, float std) {
    for (auto& x : v) x = std * (float)rng.normal();
  };
  std::vector<float> x((size_t)N * C), gate((size_t)E * C), w1((size_t)E * 2 * I * C), w2((size_t)E * C * I);
  std::vector<float> out((size_t)N * C), dout((size_t)N * C), dx((size_t)N * C);
  std::vector<float> dgate(gate.size()), dw1(w1.size()), dw2(w2.size());
  fill(x, 1.0f), fill(gate, 1.0f / 16), fill(w1, 0.02f), fill(w2, 0.02f), fill(dout, 1.0f);
  moe::MoeCache cache;
  double wall = 0, cpu = 0;
  for (int r = 0; r < warmup + reps; r++) {
    const double t0 = now_s(), c0 = cpu_s();
    moe::moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), out.data(), cache);
    moe::moe_backward(be, s, x.data(), gate.data(), w1.data(), w2.data(), dout.data(), cache, nullptr,
                      dx.data(), dgate.data(), dw1.data(), dw2.data());
    if (r >= warmup) wall += now_s() - t0, cpu += cpu_s() - c0;
  }
  const int most = *std::max_element(cache.dispatch.counts.begin(), cache.dispatch.counts.end());
  const int least = *std::min_element(cache.dispatch.counts.begin(), cache.dispatch.counts.end());
  // FLOPs: forward 2·N·k·(2I·C + I·C) + router 2·N·E·C, backward twice that.
  const double flops = 3.0 * (2.0 * N * k * 3.0 * I * C + 2.0 * N * E * C);
  const double ms = wall / reps * 1e3;
  if (json) {
    const OrderedJson j = {{"impl", "ratchet"}, {"N", N}, {"C", C}, {"E", E}, {"k", k}, {"I", I},
                           {"threads", threads}, {"ms", ms}, {"cpu_ms", cpu / reps * 1e3},
                           {"gflops", flops / (ms / 1e3) / 1e9}, {"min_rows", least}, {"max_rows", most}};
    std::printf("%s\n", json_line(j).c_str());
  } else {
    std::printf("ratchet MoE layer N=%d C=%d E=%d k=%d I=%d threads=%d: %.2f ms fwd+bwd (cpu %.2f ms), "
                "%.1f GFLOP/s; rows per expert %d..%d\n",
                N, C, E, k, I, threads, ms, cpu / reps * 1e3, flops / (ms / 1e3) / 1e9, least, most);
  }
  return 0;
}

int main(int argc, char** argv) {
  return ratchet::bench::bench_main("bench_moe_layer", [&] { return run_main(argc, argv); });
}
