// Per-kernel memory bandwidth (GB/s) for the memory-bound kernels of kernels/.
//
//   bench_kernels [--B 8] [--T 1024] [--C 768] [--NH 12] [--V 50257] [--iters 50]
//                 [--dtype bf16|f32] [--json]
//
// For each kernel: one validation pass (outputs finite), warm-up launches,
// then `iters` launches timed with CUDA events, nothing else in the timed
// loop. GB/s = bytes the kernel must move (its inputs read once, outputs
// written once: the *_bytes() formula its header states) / time; "copy" = that
// rate as a share of a device-to-device cudaMemcpy of 256 MiB measured first in
// the same run (bytes read + written / time), the practical ceiling. Built
// against simt (bench_kernels_simt) it runs every kernel once at small shapes
// and validates, without timing: simt is not a performance model.
//
// Example: bench_kernels --B 8 --T 1024 --json > kernels.json
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "core/json.h"
#include "kernels/adamw.cuh"
#include "kernels/attention.cuh"
#include "kernels/flash_attention.cuh"
#include "kernels/bias_grad.cuh"
#include "kernels/cast.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/swiglu.cuh"

using namespace ratchet::kernels;

namespace {

struct Opts {
  int B = 8, T = 1024, C = 768, NH = 12, V = 50257, iters = 50;
  bool bf16 = true, json = false;
};

#if RATCHET_SIMT
constexpr bool kTimed = false;
void* dalloc(size_t bytes) { return std::calloc(1, bytes + 16); }
void dfree(void* p) { std::free(p); }
void dcopy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void dfill(void* p, size_t bytes) {  // small deterministic values
  auto* u = static_cast<unsigned short*>(p);
  for (size_t i = 0; i < bytes / 2; i++) u[i] = 0x3c00 + (unsigned short)(i % 64);
}
bool device_ok() { return true; }
#else
constexpr bool kTimed = true;
void* dalloc(size_t bytes) {
  void* p = nullptr;
  cudaCheck(cudaMalloc(&p, bytes));
  cudaCheck(cudaMemset(p, 0, bytes));
  return p;
}
void dfree(void* p) { cudaFree(p); }
void dcopy_to_host(void* dst, const void* src, size_t bytes) {
  cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void dfill(void* p, size_t bytes) {  // bf16 ~1.0 / small float patterns, finite either way
  std::vector<unsigned short> h(bytes / 2);
  for (size_t i = 0; i < h.size(); i++) h[i] = 0x3c00 + (unsigned short)(i % 64);
  cudaCheck(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
}
bool device_ok() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::fprintf(stderr, "bench_kernels: no CUDA device (%s)\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return false;
  }
  return true;
}
#endif

struct Buf {
  void* p;
  size_t bytes;
};

struct Bench {
  Opts o;
  std::vector<Buf> bufs;
  int failures = 0;
  bool first_json = true;
  double copy_gbps = 0;  // the measured device-to-device copy: GB/s (read + write)

  ~Bench() {
    for (auto& b : bufs) dfree(b.p);
  }
  template <class U>
  U* alloc(size_t n, bool fill = true) {
    size_t bytes = std::max<size_t>(n, 1) * sizeof(U);
    void* p = dalloc(bytes);
    if (fill) dfill(p, bytes & ~size_t(1));
    bufs.push_back({p, bytes});
    return static_cast<U*>(p);
  }

  // Validation: every output element finite (outputs read back as FP32 or BF16).
  template <class U>
  bool finite(const U* p, size_t n) {
    std::vector<U> h(n);
    dcopy_to_host(h.data(), p, n * sizeof(U));
    for (auto& x : h) {
      float f;
      if constexpr (std::is_same<U, float>::value) f = x;
      else f = __bfloat162float(x);
      if (!std::isfinite(f)) return false;
    }
    return true;
  }

  void report(const char* name, double bytes, double ms, bool ok) {
    if (!ok) failures++;
    const double gbps = ms > 0 ? bytes / ms / 1e6 : 0.0;
    const double share = copy_gbps > 0 ? gbps / copy_gbps : 0.0;
    if (o.json) {
      const ratchet::OrderedJson j = {{"kernel", name},
                             {"bytes", ratchet::json_number(bytes)},
                             {"ms", ms},
                             {"GBps", gbps},
                             {"copy_share", share},
                             {"valid", ok}};
      std::printf("%s%s", first_json ? "[\n" : ",\n", ratchet::json_line(j).c_str());
      first_json = false;
    } else if (kTimed) {
      std::printf("%-32s %10.1f MB %10.4f ms %8.1f GB/s %5.1f%% of copy %s\n", name, bytes / 1e6,
                  ms, gbps, 100.0 * share, ok ? "" : "INVALID OUTPUT");
    } else {
      std::printf("%-32s %10.1f MB  %s\n", name, bytes / 1e6, ok ? "valid (simt)" : "INVALID");
    }
  }

  // Milliseconds per call of fn after 3 warm-up calls, averaged over --iters
  // calls between two events; 0 under simt, which times nothing.
  double time_ms(const std::function<void()>& fn) {
    double ms = 0;
    (void)fn;
#if !RATCHET_SIMT
    for (int i = 0; i < 3; i++) fn();
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    cudaCheck(cudaEventRecord(a));
    for (int i = 0; i < o.iters; i++) fn();
    cudaCheck(cudaEventRecord(b));
    cudaCheck(cudaEventSynchronize(b));
    float t = 0;
    cudaCheck(cudaEventElapsedTime(&t, a, b));
    ms = t / o.iters;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
#endif
    return ms;
  }

  // Runs fn once (validated by check), then warm-up + timed iterations.
  void run(const char* name, double bytes, const std::function<void()>& fn,
           const std::function<bool()>& check) {
    fn();
    bool ok = check();
    report(name, bytes, time_ms(fn), ok);
  }

  // The ceiling the kernels are compared with: cudaMemcpyAsync device to device
  // of 256 MiB (256 KiB under simt), read + write, timed like a kernel.
  void measure_copy() {
    const size_t bytes = kTimed ? (size_t)256 << 20 : (size_t)256 << 10;
    auto* src = alloc<unsigned char>(bytes);
    auto* dst = alloc<unsigned char>(bytes, false);
    auto copy = [&] {
#if RATCHET_SIMT
      std::memcpy(dst, src, bytes);
#else
      cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr));
#endif
    };
    copy();
    const double ms = time_ms(copy);
    report("copy_d2d (cudaMemcpy)", 2.0 * bytes, ms, true);
    copy_gbps = ms > 0 ? 2.0 * bytes / ms / 1e6 : 0.0;
  }

  template <class T>
  void all() {
    const int B = o.B, Tn = o.T, C = o.C, NH = o.NH, HS = C / NH, V = o.V;
    const int Vp = (V + 127) / 128 * 128, N = B * Tn, BH = B * NH;
    const size_t s = sizeof(T), NC = (size_t)N * C;
    cudaStream_t st = nullptr;

    auto* tokens = alloc<int>(N, false);
    std::vector<int> host_tokens(N);
    for (int i = 0; i < N; i++) host_tokens[i] = (i * 7919) % V;
    const int distinct = (int)std::set<int>(host_tokens.begin(), host_tokens.end()).size();
    {
      const std::vector<int>& h = host_tokens;
#if RATCHET_SIMT
      std::memcpy(tokens, h.data(), N * sizeof(int));
#else
      cudaCheck(cudaMemcpy(tokens, h.data(), N * sizeof(int), cudaMemcpyHostToDevice));
#endif
    }
    T* wte = alloc<T>((size_t)Vp * C);
    T* wpe = alloc<T>((size_t)Tn * C);
    T* x = alloc<T>(NC);
    T* y = alloc<T>(NC);
    T* z = alloc<T>(NC);
    T* w = alloc<T>(C);
    T* b = alloc<T>(C);
    float* mean = alloc<float>(N, false);
    float* rstd = alloc<float>(N, false);

    measure_copy();
    // The bytes of each kernel: the *_bytes() function its header states.
    run("encoder_forward", encoder_forward_bytes(B, Tn, C, s),
        [&] { encoder_forward(y, tokens, wte, wpe, B, Tn, C, st); },
        [&] { return finite(y, NC); });
    {
      T* dwte = alloc<T>((size_t)Vp * C);
      T* dwpe = alloc<T>((size_t)Tn * C);
      void* enc_scratch = alloc<unsigned char>(encoder_backward_scratch_bytes(B, Tn), false);
      run("encoder_backward", encoder_backward_bytes(B, Tn, C, distinct, s),
          [&] { encoder_backward(dwte, dwpe, enc_scratch, x, tokens, B, Tn, C, st); },
          [&] { return true; });  // accumulates repeatedly: validated by the tests
    }
    run("layernorm_forward", layernorm_forward_bytes(N, C, s),
        [&] { layernorm_forward(y, mean, rstd, x, w, b, N, C, st); },
        [&] { return finite(y, NC) && finite(rstd, N); });
    run("residual_layernorm_forward", residual_layernorm_forward_bytes(N, C, s),
        [&] { residual_layernorm_forward(z, y, mean, rstd, x, x, w, b, N, C, st); },
        [&] { return finite(y, NC) && finite(z, NC); });
    // Gradients of their own (not w, b: the weights must not drift while timed).
    T* dw = alloc<T>(C);
    T* db = alloc<T>(C);
    void* ln_scratch = alloc<unsigned char>(layernorm_backward_scratch_bytes(N, C), false);
    run("layernorm_backward", layernorm_backward_bytes(N, C, s),
        [&] { layernorm_backward(z, dw, db, ln_scratch, x, y, w, mean, rstd, N, C, st); },
        [&] { return true; });  // accumulates into z repeatedly: validated by the tests
    // MLP width 4C.
    T* h4 = alloc<T>(4 * NC);
    T* g4 = alloc<T>(4 * NC);
    run("gelu_forward", gelu_forward_bytes(4 * NC, s), [&] { gelu_forward(g4, h4, 4 * NC, st); },
        [&] { return finite(g4, 4 * NC); });
    run("gelu_backward", gelu_backward_bytes(4 * NC, s),
        [&] { gelu_backward(g4, h4, h4, 4 * NC, st); }, [&] { return finite(g4, 4 * NC); });
    // bias_grad over (N, 4C) (the fc layer's; cuBLASLt's BGRADB epilogue when it has one).
    void* bg_scratch = alloc<unsigned char>(bias_grad_scratch_bytes(N, 4 * C), false);
    T* dbias = alloc<T>(4 * C);
    run("bias_grad", bias_grad_bytes(N, 4 * C, s),
        [&] { bias_grad(dbias, bg_scratch, h4, N, 4 * C, st); }, [&] { return true; });
    // Llama (issue 17).
    run("rmsnorm_forward", rmsnorm_forward_bytes(N, C, s),
        [&] { rmsnorm_forward(y, rstd, x, w, N, C, 1e-5f, st); },
        [&] { return finite(y, NC) && finite(rstd, N); });
    run("residual_rmsnorm_forward", residual_rmsnorm_forward_bytes(N, C, s),
        [&] { residual_rmsnorm_forward(z, y, rstd, x, x, w, N, C, 1e-5f, st); },
        [&] { return finite(y, NC) && finite(z, NC); });
    void* rms_scratch = alloc<unsigned char>(rmsnorm_backward_scratch_bytes(N, C), false);
    run("rmsnorm_backward", rmsnorm_backward_bytes(N, C, s),
        [&] { rmsnorm_backward(z, dw, rms_scratch, x, y, w, rstd, N, C, st); },
        [&] { return true; });  // accumulates into z repeatedly: validated by the tests
    // SwiGLU at H = 2C over h4 as (N, 2H): forward reads 2H, writes H: 6 N C s;
    // backward reads 2H and H, writes 2H: 10 N C s.
    run("swiglu_forward", 6.0 * NC * s, [&] { swiglu_forward(g4, h4, N, 2 * C, st); },
        [&] { return finite(g4, 2 * NC); });
    run("swiglu_backward", 10.0 * NC * s, [&] { swiglu_backward(g4, h4, h4, N, 2 * C, st); },
        [&] { return finite(g4, 4 * NC); });
    // attention permute: reads qkv, writes q,k,v: 6 N C s; unpermute 2 N C s
    T* qkv = alloc<T>(3 * NC);
    // RoPE in place on q and k of qkv (KV = NH): reads and writes 2 N C: 4 N C s
    // (the (T, HS/2) cos/sin table stays in cache).
    float* cos_sin = alloc<float>((size_t)Tn * HS, false);
    run("rope_forward", 4.0 * NC * s,
        [&] { rope_forward(qkv, cos_sin, B, Tn, NH, NH, HS, Tn, st); },
        [&] { return finite(qkv, 3 * NC); });
    run("rope_backward", 4.0 * NC * s,
        [&] { rope_backward(qkv, cos_sin, B, Tn, NH, NH, HS, Tn, st); },
        [&] { return finite(qkv, 3 * NC); });
    T* q = alloc<T>(NC);
    T* k = alloc<T>(NC);
    T* v = alloc<T>(NC);
    run("attention_permute", 6.0 * NC * s,
        [&] { attention_permute(q, k, v, qkv, B, Tn, NH, NH, HS, st); },
        [&] { return finite(v, NC); });
    run("attention_unpermute", 2.0 * NC * s,
        [&] { attention_unpermute(y, q, B, Tn, NH, HS, st); }, [&] { return finite(y, NC); });
    // causal softmax: reads the lower triangle, writes the full rows: 1.5 BH T^2 s
    size_t natt = (size_t)BH * Tn * Tn;
    T* pre = alloc<T>(natt);
    T* att = alloc<T>(natt);
    float scale = 1.0f / std::sqrt((float)HS);
    run("attention_softmax_forward", 1.5 * natt * s,
        [&] { attention_softmax_forward(att, pre, BH, Tn, scale, st); },
        [&] { return finite(att, natt); });
    // softmax backward: reads att, datt lower triangles, writes full rows: 2 BH T^2 s
    run("attention_softmax_backward", 2.0 * natt * s,
        [&] { attention_softmax_backward(pre, att, att, BH, Tn, scale, st); },
        [&] { return finite(pre, natt); });
    // flash attention (kernels/flash_attention.cuh), the default attention of the
    // cuda backend. Compute-bound (forward 2·T²·HS·BH FLOPs, backward 7·T²·HS·BH):
    // the figure is the bytes it must move (qkv read, out written, lse; backward
    // also dout, out read and dqkv written), so GB/s is a floor on its speed.
    if (flash_attention_supports(HS)) {
      float* lse = alloc<float>((size_t)BH * Tn, false);
      float* dsc = alloc<float>((size_t)BH * Tn, false);
      T* dqkv = alloc<T>(3 * NC);
      run("flash_attention_forward", 4.0 * NC * s + 4.0 * BH * Tn,
          [&] { flash_attention_forward(y, lse, qkv, B, Tn, NH, NH, HS, st); },
          [&] { return finite(y, NC); });
      run("flash_attention_backward", 8.0 * NC * s + 8.0 * BH * Tn,
          [&] { flash_attention_backward(dqkv, dsc, z, qkv, y, lse, B, Tn, NH, NH, HS, st); },
          [&] { return finite(dqkv, 3 * NC); });
    }
    // Fused classifier, as a training step runs it (CudaBackend::classifier calls
    // this launcher on the lm head's output). The timed loop holds the kernel
    // only: it used to refill the logits from the host before every call (a
    // host loop over B*T*Vp values and a pageable copy, about 2 s at B=16
    // T=1024), which is what the 1.7-2.2 s per call measured. Calls after the
    // first run on the previous call's gradient: the same work per element.
    T* logits = alloc<T>((size_t)N * Vp);
    float* losses = alloc<float>(N, false);
    run("fused_classifier", fused_classifier_bytes(N, V, Vp, true, s),
        [&] { fused_classifier(logits, losses, tokens, N, V, Vp, 1.0f / N, st); },
        [&] { return finite(losses, N) && finite(logits, (size_t)N * Vp); });
    run("fused_classifier (loss only)", fused_classifier_bytes(N, V, Vp, false, s),
        [&] { fused_classifier(logits, losses, tokens, N, V, Vp, 0.0f, st); },
        [&] { return finite(losses, N); });
    // AdamW over the GPT-2 small parameter count (scaled by C):
    //   reads grads (s), m, v, master (12), writes m, v, master (12), params (s)
    size_t np = (size_t)12 * 12 * C * C + (size_t)Vp * C;
    T* params = alloc<T>(np);
    T* grads = alloc<T>(np);
    float* master = alloc<float>(np);
    float* m1 = alloc<float>(np, false);
    float* m2 = alloc<float>(np, false);
    AdamWHyper hp;
    run("adamw_update", adamw_bytes(np, s, true),
        [&] { adamw_update(params, master, grads, m1, m2, np, hp, 7u, st); },
        [&] { return finite(master, np); });
    // global norm: reads n s
    double* out = alloc<double>(1, false);
    void* gn_scratch = alloc<unsigned char>(global_norm_scratch_bytes(), false);
    run("global_norm_squared", global_norm_squared_bytes(np, s),
        [&] { global_norm_squared(out, gn_scratch, grads, np, st); },
        [&] { return true; });
    // cast FP32 -> storage: reads 4, writes s per element
    run("cast_f32_to_storage", cast_bytes(np, s, 4), [&] { cast(params, master, np, st); },
        [&] { return finite(params, np); });
  }
};

}  // namespace

static int run_main(int argc, char** argv) {
  Bench bench;
  Opts& o = bench.o;
  if (!kTimed) o = Opts{2, 64, 64, 4, 1000, 1, true, false};  // simt: small, validate only
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) ratchet::fail(a, " needs a value");
      return (int)ratchet::bench::parse_int_flag(a, argv[++i], 1, 1 << 30);
    };
    if (a == "--B") o.B = next();
    else if (a == "--T") o.T = next();
    else if (a == "--C") o.C = next();
    else if (a == "--NH") o.NH = next();
    else if (a == "--V") o.V = next();
    else if (a == "--iters") o.iters = next();
    else if (a == "--json") o.json = true;
    else if (a == "--dtype") {
      std::string d = i + 1 < argc ? argv[++i] : "";
      if (d != "bf16" && d != "f32") {
        std::fprintf(stderr, "bench_kernels: --dtype must be bf16 or f32\n");
        return 2;
      }
      o.bf16 = d == "bf16";
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "bench_kernels [--B 8] [--T 1024] [--C 768] [--NH 12] [--V 50257] [--iters 50]\n"
          "              [--dtype bf16|f32] [--json]\n"
          "Per-kernel GB/s of the memory-bound kernels (CUDA events, after warm-up).\n"
          "Example: bench_kernels --B 4 --T 1024 --json\n");
      return 0;
    } else {
      std::fprintf(stderr, "bench_kernels: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (o.C % o.NH != 0) {
    std::fprintf(stderr, "bench_kernels: --C %d is not a multiple of --NH %d\n", o.C, o.NH);
    return 2;
  }
  // Flags first (exit 2), then the device: none is exit 69, as every GPU benchmark.
  if (!device_ok()) return ratchet::bench::kExitNoDevice;
  if (!o.json)
    std::printf("# B=%d T=%d C=%d NH=%d V=%d dtype=%s iters=%d\n", o.B, o.T, o.C, o.NH, o.V,
                o.bf16 ? "bf16" : "f32", o.iters);
  if (o.bf16) bench.all<bf16>();
  else bench.all<float>();
  if (o.json) std::printf("\n]\n");
  return bench.failures ? 1 : 0;
}

// Uncaught exceptions become exit 2 (bad input) or 1 (bench/bench_main.h).
int main(int argc, char** argv) {
  return ratchet::bench::bench_main("bench_kernels", [&] { return run_main(argc, argv); });
}
