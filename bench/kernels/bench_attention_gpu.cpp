// Causal attention on a GPU, forward + backward, per implementation of
// `--attention`: flash (kernels/flash_attention.cuh), cudnn (cuDNN's fused
// attention, src/backend/cuda/cudnn_attention.h) and materialized (cuBLAS
// GEMMs around a (B,NH,T,T) softmax). Each runs through the cuda backend's
// attention_forward/attention_backward in BF16, exactly as training calls it.
//
//   bench_attention_gpu [--B 8] [--NH 12] [--KV NH] [--HS 64] [--T 512,1024,2048,4096]
//                   [--impl flash,cudnn,materialized] [--iters 20] [--warmup 3] [--json]
//                   [--window W] [--softcap c]
// --window, --softcap: issue 38's AttnOpts (a sliding window of W keys; scores
// c·tanh(s/c)); cudnn refuses both (reported as "not run").
//
// Per shape and implementation:
//   1. correctness, a separate pass: the same inputs (BF16-representable) on
//      the cpu backend at B=1 (out NMSE < 1e-3, dqkv NMSE < 1e-2: BF16
//      storage, loose enough for every implementation, tight enough to catch
//      a wrong mask, scale or layout); a failing implementation is not timed;
//   2. `warmup` forward+backward pairs, then `iters` pairs timed with CUDA
//      events on the backend's stream: ms per forward, per backward.
// FLOPs (causal, the FlashAttention papers' convention): forward
// 4·B·NH·T²·HS / 2 (QK^T and PV over the lower triangle), backward 2.5x the
// forward (five GEMMs instead of two). TFLOP/s = FLOPs / time. With a window
// W < T the visible pairs T·W - W(W-1)/2 replace T²/2.
//
// Exit codes: 0 measured (every implementation that ran was correct); 1 an
// implementation gave wrong results; 2 bad usage; 69 no GPU (EX_UNAVAILABLE,
// as scripts/gpu-check.sh): nothing measured.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/json.h"
#include "core/rng.h"

namespace {

using ratchet::AttentionImpl;
using ratchet::Backend;

struct Opts {
  int B = 8, NH = 12, KV = 0, HS = 64, iters = 20, warmup = 3;  // KV 0: NH (no GQA)
  int window = 0;      // --window: 0 none
  float softcap = 0;   // --softcap: 0 none
  std::vector<int> T = {512, 1024, 2048, 4096};
  std::vector<AttentionImpl> impls = {AttentionImpl::flash, AttentionImpl::cudnn,
                                      AttentionImpl::materialized};
  bool json = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_attention_gpu: %s\nusage: bench_attention_gpu [--B 8] [--NH 12] [--KV NH] "
               "[--HS 64] "
               "[--T 512,1024,2048,4096] [--impl flash,cudnn,materialized] [--iters 20] "
               "[--warmup 3] [--json] [--window W] [--softcap c]\n",
               why.c_str());
  std::exit(2);
}

int positive(const std::string& flag, const char* v) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (!*v || *end || x <= 0 || x > (1 << 20)) usage(flag + " '" + v + "' is not a positive count");
  return (int)x;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

Opts parse(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (a == "-h" || a == "--help") usage("help");
    if (i + 1 >= argc) usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--B") o.B = positive(a, v);
    else if (a == "--NH") o.NH = positive(a, v);
    else if (a == "--KV") o.KV = positive(a, v);
    else if (a == "--HS") o.HS = positive(a, v);
    else if (a == "--iters") o.iters = positive(a, v);
    else if (a == "--warmup") o.warmup = positive(a, v);
    else if (a == "--window") o.window = positive(a, v);
    else if (a == "--softcap") {
      char* end = nullptr;
      o.softcap = std::strtof(v, &end);
      if (!*v || *end || !(o.softcap > 0) || !std::isfinite(o.softcap))
        usage(a + " '" + v + "' is not a positive number");
    }
    else if (a == "--T") {
      o.T.clear();
      for (auto& t : split(v)) o.T.push_back(positive(a, t.c_str()));
    } else if (a == "--impl") {
      o.impls.clear();
      try {
        for (auto& n : split(v)) o.impls.push_back(ratchet::parse_attention(n));
      } catch (const ratchet::Error& e) {
        usage(e.what());
      }
    } else {
      usage("unknown option " + a);
    }
  }
  if (o.T.empty() || o.impls.empty()) usage("--T and --impl need at least one value");
  if (!o.KV) o.KV = o.NH;
  if (o.NH % o.KV)
    usage("--KV " + std::to_string(o.KV) + " must divide --NH " + std::to_string(o.NH));
  return o;
}

// Device buffers of one attention call, in a backend's memory.
struct Buffers {
  Backend& be;
  int B, T, NH, KV, HS;
  ratchet::AttnOpts ao;
  size_t nq, no, nl;
  void *qkv, *out, *dout, *dqkv, *saved;
  Buffers(Backend& b, int B_, int T_, int NH_, int KV_, int HS_, const ratchet::AttnOpts& o)
      : be(b), B(B_), T(T_), NH(NH_), KV(KV_), HS(HS_), ao(o) {
    const size_t sb = be.memory_model().storage_bytes;
    nq = (size_t)B * T * (NH + 2 * KV) * HS;  // q | k | v heads
    no = (size_t)B * T * NH * HS;
    nl = (size_t)B * NH * T;
    qkv = be.alloc(nq * sb);
    out = be.alloc(no * sb);
    dout = be.alloc(no * sb);
    dqkv = be.alloc(nq * sb);
    saved = be.alloc(ratchet::attention_saved_bytes(be.attention_impl(), B, NH, T, sb));
  }
  ~Buffers() {
    for (void* p : {qkv, out, dout, dqkv, saved}) be.release(p);
  }
  void forward() { be.attention_forward(out, saved, qkv, B, T, NH * HS, NH, KV, ao); }
  void backward() {
    be.attention_backward(dqkv, dout, qkv, out, saved, B, T, NH * HS, NH, KV, ao);
  }
};

std::vector<float> bf16_values(ratchet::Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = __bfloat162float(__float2bfloat16(rng.normal()));
  return v;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (double)(a[i] - ref[i]);
    den += ref[i] * (double)ref[i];
  }
  return den > 0 ? num / den : num;
}

// Correctness at B=1: out and dqkv against the cpu backend. "" when within limits.
std::string check(Backend& be, Backend& cpu, int T, int NH, int KV, int HS,
                  const ratchet::AttnOpts& ao) {
  ratchet::Rng rng(1234 + T);
  Buffers d(be, 1, T, NH, KV, HS, ao), c(cpu, 1, T, NH, KV, HS, ao);
  const auto qkv = bf16_values(rng, d.nq), dout = bf16_values(rng, d.no);
  for (Buffers* b : {&d, &c}) {
    b->be.upload_f32(b->qkv, qkv.data(), b->nq);
    b->be.upload_f32(b->dout, dout.data(), b->no);
    b->forward();
    b->backward();
  }
  std::vector<float> o1(d.no), o2(d.no), g1(d.nq), g2(d.nq);
  be.download_f32(o1.data(), d.out, d.no);
  be.download_f32(g1.data(), d.dqkv, d.nq);
  cpu.download_f32(o2.data(), c.out, c.no);
  cpu.download_f32(g2.data(), c.dqkv, c.nq);
  const double eo = nmse(o1, o2), eg = nmse(g1, g2);
  if (eo < 1e-3 && eg < 1e-2) return "";
  char msg[160];
  std::snprintf(msg, sizeof msg, "out NMSE %.3g (limit 1e-3), dqkv NMSE %.3g (limit 1e-2)", eo, eg);
  return msg;
}

}  // namespace

static int run_main(int argc, char** argv) {
  const Opts o = parse(argc, argv);
  std::string why;
  if (!ratchet::cuda::device_available(&why)) {
    std::fprintf(stderr, "bench_attention_gpu: no GPU (%s); nothing measured. Run it on a GPU node "
                 "(scripts/gpu-check.sh does). Exit 69.\n", why.c_str());
    return 69;
  }
  auto cpu = ratchet::make_cpu_backend(0);
  const std::string dev = ratchet::cuda::device_info().name;
  if (!o.json)
    std::printf("%s, BF16, causal, B=%d NH=%d KV=%d HS=%d, %d timed iterations after %d warm-up\n"
                "%-13s %6s %10s %10s %12s %12s  %s\n",
                dev.c_str(), o.B, o.NH, o.KV, o.HS, o.iters, o.warmup, "impl", "T", "fwd ms",
                "bwd ms", "fwd TFLOP/s", "bwd TFLOP/s", "check");
  ratchet::AttnOpts ao;
  ao.window = o.window;
  ao.softcap = o.softcap;
  if (!o.json && (o.window || o.softcap))
    std::printf("window %d, soft-cap %g\n", o.window, o.softcap);
  int rc = 0;
  for (int T : o.T) {
    const double W = o.window, pairs = o.window > 0 && o.window < T
                                           ? (double)T * W - W * (W - 1) / 2
                                           : (double)T * T / 2;
    const double fwd_flop = 4.0 * o.B * o.NH * pairs * o.HS, bwd_flop = 2.5 * fwd_flop;
    for (AttentionImpl impl : o.impls) {
      const char* name = ratchet::attention_name(impl);
      std::string status, err;
      double fwd_ms = 0, bwd_ms = 0;
      try {
        auto be = ratchet::make_cuda_backend("bf16", impl);
        err = check(*be, *cpu, T, o.NH, o.KV, o.HS, ao);
        if (!err.empty()) {
          status = "WRONG: " + err;
          rc = 1;
        } else {
          Buffers b(*be, o.B, T, o.NH, o.KV, o.HS, ao);
          ratchet::Rng rng(7);
          const auto qkv = bf16_values(rng, b.nq), dout = bf16_values(rng, b.no);
          be->upload_f32(b.qkv, qkv.data(), b.nq);
          be->upload_f32(b.dout, dout.data(), b.no);
          for (int i = 0; i < o.warmup; i++) {
            b.forward();
            b.backward();
          }
          cudaEvent_t e0, e1, e2;
          cudaCheck(cudaEventCreate(&e0));
          cudaCheck(cudaEventCreate(&e1));
          cudaCheck(cudaEventCreate(&e2));
          float f = 0, g = 0;
          for (int i = 0; i < o.iters; i++) {
            // The backend's stream is the default stream.
            cudaCheck(cudaEventRecord(e0, nullptr));
            b.forward();
            cudaCheck(cudaEventRecord(e1, nullptr));
            b.backward();
            cudaCheck(cudaEventRecord(e2, nullptr));
            cudaCheck(cudaEventSynchronize(e2));
            float a = 0, c = 0;
            cudaCheck(cudaEventElapsedTime(&a, e0, e1));
            cudaCheck(cudaEventElapsedTime(&c, e1, e2));
            f += a;
            g += c;
          }
          for (auto e : {e0, e1, e2}) cudaEventDestroy(e);
          fwd_ms = f / o.iters;
          bwd_ms = g / o.iters;
          status = "ok (B=1 vs cpu)";
        }
      } catch (const ratchet::Error& e) {
        status = std::string("not run: ") + e.what();  // e.g. out of memory, no cuDNN
      }
      const double ft = fwd_ms > 0 ? fwd_flop / (fwd_ms * 1e9) : 0,
                   bt = bwd_ms > 0 ? bwd_flop / (bwd_ms * 1e9) : 0;
      if (o.json) {
        nlohmann::json j = {{"device", dev}, {"impl", name}, {"B", o.B}, {"NH", o.NH}, {"KV", o.KV},
                            {"HS", o.HS}, {"T", T}, {"window", o.window},
                            {"softcap", o.softcap}, {"fwd_ms", fwd_ms}, {"bwd_ms", bwd_ms},
                            {"fwd_tflops", ft}, {"bwd_tflops", bt}, {"status", status}};
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%-13s %6d %10.3f %10.3f %12.1f %12.1f  %s\n", name, T, fwd_ms, bwd_ms, ft,
                    bt, status.c_str());
      }
      std::fflush(stdout);
    }
  }
  return rc;
}

// Uncaught exceptions become exit 2 (bad input) or 1 (bench/bench_main.h).
int main(int argc, char** argv) {
  return ratchet::bench::bench_main("bench_attention_gpu", [&] { return run_main(argc, argv); });
}
