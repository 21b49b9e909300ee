// The matmul wrapper: row-major GEMMs with epilogues, on cuBLASLt (nvcc build)
// or on a CPU stand-in that honours the same descriptors (simt build).
//
// Row-major semantics (what callers write):
//   C (m,n) = alpha * op(A) (m,k) @ op(B) (k,n) + beta * C     batched: `batch`
//   op(X) = X or X^T; A is stored (m,k) or, transposed, (k,m), with leading
//   dimension lda (elements between rows); likewise B, C. Batch b uses
//   A + b*strideA, B + b*strideB, C + b*strideC (elements).
// Epilogues, applied to v = alpha*AB + beta*C (per element (i,j)):
//   none       C = v
//   bias       C = v + bias[j]                           bias (n)
//   gelu_bias  aux = v + bias[j]; C = gelu(aux)          aux (m,n), ld ldaux; bias may be null
//   dgelu      C = v * gelu'(aux[i,j])                   aux (m,n): the pre-GELU input
//   bgrad      C = v; dbias[i] = sum_p op(A)[i,p]        dbias (m) OVERWRITTEN (not +=):
//              for dW (OC,C) = dout^T inp, A = dout transposed, so dbias = column sums of dout
// GELU is the tanh approximation (same as kernels/gelu.cu and cuBLASLt).
//
// How it maps to cuBLASLt (column-major): a row-major X (r,c) with leading
// dimension ld is the column-major X^T (c,r) with the same ld, so
//   C^T (n,m) = op(B)^T (n,k) @ op(A)^T (k,m)
// i.e. cuBLASLt's M = n, N = m, K = k, its A is our B (op = transB), its B is
// our A (op = transA). The row-major bias over columns j becomes cuBLASLt's
// bias over rows (length M), which is what its BIAS/GELU_BIAS epilogues take;
// our bgrad (sum of op(A) over k, per row i) is cuBLASLt's BGRADB (sum of its
// B over K, per column of D). LtCall below is that column-major description; the executor (real
// cuBLASLt, or cpu_lt_matmul) only ever sees an LtCall.
//
// Optional fused epilogues (try_run): when cuBLASLt has no algorithm for one,
// OR when cublasLtMatmul rejects the plan the first time it runs (a heuristic
// result is not a promise that the launch succeeds), the call returns false,
// the plan is marked "no algorithm" for the rest of the run, a one-time note
// goes to stderr, and the caller takes its unfused path (forward GELU, DGELU,
// BGRADB: cuda_backend.cpp). A plan that has run once and fails later is a
// real error (check_failed). llm.c ships with GELU fusion off by default for
// the same reason. Under simt, reject_epilogue() makes the stand-in reject an
// epilogue at execution, which is how the fallbacks are tested.
//
// Requirements: every pointer 16-byte aligned (and batch strides a multiple of
// 16 bytes), aux's leading dimension a multiple of 8 elements (cuBLASLt's rule
// for EPILOGUE_AUX_LD); violating ones fail naming the operand. When cuBLASLt has no
// algorithm for a call, the error names m, n, k, the layouts and the epilogue.
// Descriptors and the heuristic's algorithm are cached per LtCall shape.
//
// The algorithm is pinned per (shape, epilogue), whatever the buffers'
// addresses: the heuristic infers the alignment of the bias/aux pointers from
// their values (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER), so it is asked
// with canonical pointers aligned to exactly 16 bytes (what run() requires)
// and its choice runs on any 16-byte aligned buffer. A recompute that writes
// into another buffer (recompute policies) then runs the same algorithm and
// gets the same bits; a key with the alignment class picked another one.
//
// RATCHET_GEMM_SWEEP=N (2..32; a bench knob for the GPU window, not a user
// flag: bench/gpu/README.md): the heuristic is asked for its first N
// algorithms, and the first launch of each shape times them all (5 runs each,
// into a scratch output) and keeps the fastest for the rest of the run,
// printing "gemm sweep: <range>: heuristic #0 .. us, fastest #i .. us". The
// choice depends on timing, so two runs may differ in their bits: it measures
// what autotuning would gain; nothing selects it by default. No effect under simt.
//
// Each GEMM runs inside an NVTX range named by its epilogue and row-major
// shape ("matmul DGELU m=64 n=128 k=32"), so that a profile shows which GEMM
// of an op took the time. The ranges are also counted (ranges_opened(),
// last_range()), which is what tests check under simt where there is no profiler.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace ratchet::cuda {

enum class DType : int { f32 = 0, bf16 = 1 };
inline size_t dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::f32 ? "f32" : "bf16"; }

enum class Epilogue : int { none = 0, bias, gelu_bias, dgelu, bgrad };
const char* epilogue_name(Epilogue e);

// One row-major GEMM (see the top comment).
struct Gemm {
  bool transA = false, transB = false;
  int m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int lda = 0;
  long long strideA = 0;
  const void* B = nullptr;
  int ldb = 0;
  long long strideB = 0;
  void* C = nullptr;
  int ldc = 0;
  long long strideC = 0;
  int batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::none;
  const void* bias = nullptr;  // bias, gelu_bias (n), storage dtype
  void* aux = nullptr;         // gelu_bias (written), dgelu (read): (m,n) storage dtype
  int ldaux = 0;
  void* dbias = nullptr;       // bgrad: (m) storage dtype, overwritten
};

// C (m,n) = op(A) (m,k) @ op(B) (k,n), row-major, arguments in cblas_sgemm's
// order; alpha 1, beta 0, one matrix, no epilogue (set those fields after).
inline Gemm row_major_gemm(bool transA, bool transB, int m, int n, int k, const void* A, int lda,
                           const void* B, int ldb, void* C, int ldc) {
  Gemm g;
  g.transA = transA;
  g.transB = transB;
  g.m = m;
  g.n = n;
  g.k = k;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  return g;
}

// The same GEMM in cuBLASLt's column-major terms.
struct LtCall {
  bool opA_T = false, opB_T = false;  // op of the stored matrices
  int M = 0, N = 0, K = 0;            // D (M,N) = op(A) (M,K) op(B) (K,N)
  int rowsA = 0, colsA = 0, lda = 0;  // stored A: rows x cols, column-major
  int rowsB = 0, colsB = 0, ldb = 0;
  int ldc = 0;                        // C and D: M x N, column-major (the same buffer)
  long long strideA = 0, strideB = 0, strideC = 0;
  int batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::none;  // bgrad here means cuBLASLt's BGRADB
  bool has_bias = false;               // gelu_bias without bias is cuBLASLt's GELU_AUX
  int ldaux = 0;
  DType dtype = DType::f32;
  const void* A = nullptr;
  const void* B = nullptr;
  void* C = nullptr;
  const void* bias = nullptr;  // (M)
  void* aux = nullptr;         // (M,N), ld ldaux
  void* dbias = nullptr;       // (N): BGRADB sums op(B) over K

  // The cache key: everything but the pointers and alpha/beta values (beta's
  // zero-ness matters to nothing in cuBLASLt's descriptors). No alignment:
  // plans are chosen for 16-byte aligned pointers (see the top comment).
  auto key() const {
    return std::make_tuple(opA_T, opB_T, M, N, K, lda, ldb, ldc, strideA, strideB, strideC,
                           batch, (int)epilogue, has_bias, ldaux, (int)dtype);
  }
  std::string describe() const;  // "M=.. N=.. K=.. A(..) B(..) D(..) epilogue .. dtype .."
};

// RATCHET_GEMM_SWEEP's value (0 when unset); an Error naming the variable
// for anything but a whole number from 2 to kMaxGemmSweep.
constexpr int kMaxGemmSweep = 32;
int gemm_sweep_from_env();

// Row-major -> column-major translation (pure; tested).
LtCall to_lt(const Gemm& g, DType dtype);

// The CPU stand-in: executes an LtCall with cuBLASLt's semantics (FP32
// accumulation in k order, one rounding to the storage dtype at the end; beta
// == 0 never reads C). Host memory. Always compiled (tests use it as well).
void cpu_lt_matmul(const LtCall& c);

// The wrapper: one per stream. Holds the cuBLASLt handle, the workspace and
// the descriptor/algorithm cache (under simt: only the cache bookkeeping).
class Matmul {
 public:
  // stream: a cudaStream_t (void* here to keep CUDA headers out).
  explicit Matmul(DType dtype, void* stream = nullptr);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // Runs g; fails (check_failed) when no algorithm exists or a pointer is misaligned.
  void run(const Gemm& g);
  // Like run() but returns false instead of failing when cuBLASLt offers no
  // algorithm (e.g. an epilogue it lacks for these types); the caller falls back.
  bool try_run(const Gemm& g);

  // Tests: every later execution of epilogue e fails as a cublasLtMatmul
  // rejection would (stand-in only; the real cuBLASLt decides for itself).
  void reject_epilogue(Epilogue e) { rejected_ |= 1u << (int)e; }
  // Every later try_run with epilogue e returns false at once, in both builds
  // (cuBLASLt is not asked): the caller takes its unfused path. Tests force the
  // fallbacks on a GPU with it.
  void force_fallback(Epilogue e) { forced_ |= 1u << (int)e; }
  // Whether cuBLASLt offers an algorithm for g (its shape and epilogue; the
  // pointers need not be set): asks the heuristic once, as run() would, and
  // caches the answer. False for a forced fallback. For setup reports.
  bool offers(const Gemm& g);

  // FP32 storage only: GEMMs on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)
  // instead of exact FP32. Off by default (FP32 storage is the exact mode);
  // clears the plan cache. No effect under simt or with BF16 storage.
  void set_tf32(bool on);
  bool tf32() const { return tf32_; }

  DType dtype() const { return dtype_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  size_t cached_plans() const;  // distinct shapes seen (tests)
  void set_stream(void* stream) { stream_ = stream; }
  long ranges_opened() const { return ranges_opened_; }  // GEMM ranges so far
  const char* last_range() const { return last_range_; }  // name of the last one

  struct Plan;  // descriptors + algorithm (cuBLASLt), opaque

 private:
  bool try_run_impl_(const Gemm& g, bool must);
  bool execute(const LtCall& c, bool must);
  Plan& plan_for(const LtCall& c);  // cached, or made (descriptors + heuristic)
  // Enqueues c on plan p; nullptr on success, else what the library said.
  const char* launch(const LtCall& c, Plan& p);
  const char* launch_one(const LtCall& c, Plan& p);
  void sweep_algos(const LtCall& c, Plan& p);  // RATCHET_GEMM_SWEEP (above)
  int sweep_ = 0;  // RATCHET_GEMM_SWEEP, 0: off
  bool tf32_ = false;
  unsigned rejected_ = 0;  // reject_epilogue() bits (stand-in)
  unsigned forced_ = 0;    // force_fallback() bits
  unsigned noted_ = 0;     // epilogues whose fallback was announced
  DType dtype_;
  void* stream_ = nullptr;
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory
  size_t workspace_bytes_ = 0;
  std::map<decltype(LtCall().key()), std::unique_ptr<Plan>> cache_;
  long ranges_opened_ = 0;
  char last_range_[96] = {};  // no allocation per GEMM
};

}  // namespace ratchet::cuda
