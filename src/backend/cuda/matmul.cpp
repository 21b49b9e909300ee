// Matmul: the cuBLASLt wrapper (nvcc build) or its CPU stand-in (simt build).
// Both share the translation (to_lt) and the per-shape cache; only execute()
// differs. See matmul.h.
#include "backend/cuda/matmul.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/memory_model.h"
#include "core/error.h"

#if !RATCHET_SIMT
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#else
#include "kernels/simt/device_guard.h"
#endif

namespace ratchet::cuda {

#if !RATCHET_SIMT
// core/error.h's family.
#define cublasCheck(call) \
  RATCHET_CHECK_STATUS("cublas", call, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString)

namespace {
// backend/memory_model.h: the figure `ratchet plan` counts too.
constexpr size_t kWorkspaceBytes = kCublasLtWorkspaceBytes;

cudaDataType_t cuda_type(DType t) { return t == DType::f32 ? CUDA_R_32F : CUDA_R_16BF; }

cublasLtEpilogue_t lt_epilogue(Epilogue e, bool has_bias) {
  switch (e) {
    case Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu_bias:
      return has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::bgrad: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}
}  // namespace

struct Matmul::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  // RATCHET_GEMM_SWEEP=N: the heuristic's first N answers, timed at the
  // first launch (sweep_algos); heur is then the fastest.
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  bool swept = false;
  bool has_algo = false;
  bool ran = false;  // executed successfully at least once
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {
cublasLtMatrixLayout_t make_layout(DType t, int rows, int cols, int ld, int batch,
                                   long long stride) {
  cublasLtMatrixLayout_t l;
  cublasCheck(cublasLtMatrixLayoutCreate(&l, cuda_type(t), rows, cols, ld));
  if (batch > 1) {
    int32_t bc = batch;
    int64_t st = stride;
    cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc,
                                                 sizeof bc));
    cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &st, sizeof st));
  }
  return l;
}
}  // namespace

#else
struct Matmul::Plan {  // simt: the stand-in needs no descriptors
  bool has_algo = true;
  bool ran = false;
};
#endif

Matmul::Matmul(DType dtype, void* stream) : dtype_(dtype), stream_(stream) {
#if !RATCHET_SIMT
  cublasLtHandle_t h;
  cublasCheck(cublasLtCreate(&h));
  handle_ = h;
  workspace_bytes_ = kWorkspaceBytes;
  workspace_ = device_malloc(workspace_bytes_);
  sweep_ = gemm_sweep_from_env();
#endif
}

int gemm_sweep_from_env() {
  const char* v = std::getenv("RATCHET_GEMM_SWEEP");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (!(*v >= '0' && *v <= '9') || *end != '\0' || n < 2 || n > kMaxGemmSweep)
    fail("RATCHET_GEMM_SWEEP='", v, "' must be a whole number from 2 to ", kMaxGemmSweep,
         " (how many of cuBLASLt's heuristic algorithms to time per GEMM shape; a bench knob, "
         "bench/gpu/README.md), or unset");
  return (int)n;
}

Matmul::~Matmul() {
  cache_.clear();
#if !RATCHET_SIMT
  if (workspace_) device_free(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
#endif
}

size_t Matmul::cached_plans() const { return cache_.size(); }

void Matmul::set_tf32(bool on) {
  tf32_ = on;
  cache_.clear();  // plans hold their compute type
}

namespace {
void require_aligned(const void* p, const char* what, const LtCall& c) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    check_failed("matmul", what, ("operand not 16-byte aligned; " + c.describe()).c_str(),
                 __func__, __FILE__, __LINE__);
}
}  // namespace

void Matmul::run(const Gemm& g) { try_run_impl_(g, true); }
bool Matmul::try_run(const Gemm& g) { return try_run_impl_(g, false); }

bool Matmul::offers(const Gemm& g) {
  if (forced_ & (1u << (int)g.epilogue)) return false;
  if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return true;
  return plan_for(to_lt(g, dtype_)).has_algo;
}

bool Matmul::try_run_impl_(const Gemm& g, bool must) {
  if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return true;
  if (!must && (forced_ & (1u << (int)g.epilogue))) return false;
  LtCall c = to_lt(g, dtype_);
  const size_t eb = dtype_bytes(dtype_);
  require_aligned(c.A, "A", c);
  require_aligned(c.B, "B", c);
  require_aligned(c.C, "C", c);
  if (c.batch > 1) {
    for (long long s : {c.strideA, c.strideB, c.strideC})
      if ((s * (long long)eb) % 16 != 0)
        check_failed("matmul", "batch stride", ("not a multiple of 16 bytes; " + c.describe()).c_str(),
                     __func__, __FILE__, __LINE__);
  }
  switch (c.epilogue) {
    case Epilogue::none: break;
    case Epilogue::bias: RATCHET_ASSERT(c.bias); require_aligned(c.bias, "bias", c); break;
    case Epilogue::gelu_bias:
    case Epilogue::dgelu:
      RATCHET_ASSERT(c.aux && c.batch == 1 && c.ldaux >= c.M);
      require_aligned(c.aux, "aux", c);
      // cuBLASLt: "must be divisible by 8" (EPILOGUE_AUX_LD); checked in both
      // builds so that simt rejects what a device would.
      if (c.ldaux % 8 != 0)
        check_failed("matmul", "ldaux",
                     ("aux leading dimension " + std::to_string(c.ldaux) +
                      " not a multiple of 8 elements; " + c.describe()).c_str(),
                     __func__, __FILE__, __LINE__);
      if (c.bias) require_aligned(c.bias, "bias", c);
      break;
    case Epilogue::bgrad:
      RATCHET_ASSERT(c.dbias && c.batch == 1);
      require_aligned(c.dbias, "dbias", c);
      break;
  }
  // The GEMM's profiler range, named in the caller's row-major terms.
  if (g.batch > 1)
    std::snprintf(last_range_, sizeof last_range_, "matmul %s m=%d n=%d k=%d batch=%d",
                  epilogue_name(g.epilogue), g.m, g.n, g.k, g.batch);
  else
    std::snprintf(last_range_, sizeof last_range_, "matmul %s m=%d n=%d k=%d",
                  epilogue_name(g.epilogue), g.m, g.n, g.k);
  ranges_opened_++;
#if !RATCHET_SIMT
  nvtxRangePushA(last_range_);
  const bool ran = execute(c, must);  // a failure aborts: no pop needed on that path
  nvtxRangePop();
  return ran;
#else
  return execute(c, must);
#endif
}

bool Matmul::execute(const LtCall& c, bool must) {
  Plan& p = plan_for(c);
  if (!p.has_algo) {
    if (!must) return false;
    check_failed("cublas", "cublasLtMatmulAlgoGetHeuristic",
                 ("no cuBLASLt algorithm for " + c.describe()).c_str(), __func__, __FILE__,
                 __LINE__);
  }
  const char* err = launch(c, p);
  if (!err) {
    p.ran = true;
    return true;
  }
  if (must || p.ran)
    check_failed("cublas", "cublasLtMatmul", (std::string(err) + "; " + c.describe()).c_str(),
                 __func__, __FILE__, __LINE__);
  // The first execution of an optional fused plan was rejected: treat it as
  // "no algorithm" from now on (see matmul.h), and say so once per epilogue.
  p.has_algo = false;
  const unsigned bit = 1u << (int)c.epilogue;
  if (!(noted_ & bit)) {
    noted_ |= bit;
    std::fprintf(stderr,
                 "ratchet: note: cuBLASLt rejected the fused %s epilogue (%s; %s): using the "
                 "unfused GEMM + kernel path for it\n",
                 epilogue_name(c.epilogue), err, c.describe().c_str());
  }
  return false;
}

#if RATCHET_SIMT
Matmul::Plan& Matmul::plan_for(const LtCall& c) {
  auto& slot = cache_[c.key()];
  if (!slot) slot = std::make_unique<Plan>();
  return *slot;
}

const char* Matmul::launch(const LtCall& c, Plan&) {
  if (rejected_ & (1u << (int)c.epilogue))
    return "CUBLAS_STATUS_NOT_SUPPORTED (the stand-in was told to reject this epilogue)";
  simt::DeviceAccess device;  // the stand-in runs "on the device" (kernels/simt/device_guard.h)
  cpu_lt_matmul(c);
  return nullptr;
}
#else
namespace {
// The epilogue's pointers on the descriptor, before each launch. For the
// heuristic (canonical = true) a pointer aligned to exactly 16 bytes stands in
// for every one: cublasLt.h (cublasLtMatmulAlgoGetHeuristic) infers the
// alignment of bias/aux pointers from the values on the descriptor without
// dereferencing them, so the algorithm it picks runs on any 16-byte aligned
// buffer, and the plan does not depend on where this call's buffers happen to be.
void set_epilogue_pointers(cublasLtMatmulDesc_t op, const LtCall& c, bool canonical = false) {
  void* const k16 = reinterpret_cast<void*>(uintptr_t{0x10010});  // 16 | k16, 32 does not
  if (c.epilogue == Epilogue::bias || (c.epilogue == Epilogue::gelu_bias && c.has_bias)) {
    const void* b = canonical ? k16 : c.bias;
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
  }
  if (c.epilogue == Epilogue::bgrad) {
    void* b = canonical ? k16 : c.dbias;
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
  }
  if (c.epilogue == Epilogue::gelu_bias || c.epilogue == Epilogue::dgelu) {
    void* x = canonical ? k16 : c.aux;
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x,
                                               sizeof x));
  }
}
}  // namespace

Matmul::Plan& Matmul::plan_for(const LtCall& c) {
  auto& slot = cache_[c.key()];
  if (slot) return *slot;
  const cublasLtHandle_t handle = static_cast<cublasLtHandle_t>(handle_);
  auto p = std::make_unique<Plan>();
  // FP32 storage: exact FP32 by default; TF32 tensor cores (10-bit mantissa
  // inputs, FP32 accumulation) only when asked (set_tf32). BF16 storage runs
  // on tensor cores with FP32 accumulation either way.
  const cublasComputeType_t ct = dtype_ == DType::f32 && tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                              : CUBLAS_COMPUTE_32F;
  cublasCheck(cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F));
  cublasOperation_t ta = c.opA_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = c.opB_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epi = lt_epilogue(c.epilogue, c.has_bias);
  cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (c.has_bias || c.epilogue == Epilogue::bgrad) {
    int32_t bt = cuda_type(c.dtype);
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                               sizeof bt));
  }
  if (c.epilogue == Epilogue::gelu_bias || c.epilogue == Epilogue::dgelu) {
    int64_t ld = c.ldaux;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                               sizeof ld));
  }
  set_epilogue_pointers(p->op, c, /*canonical=*/true);  // the heuristic reads their alignment
  p->a = make_layout(c.dtype, c.rowsA, c.colsA, c.lda, c.batch, c.strideA);
  p->b = make_layout(c.dtype, c.rowsB, c.colsB, c.ldb, c.batch, c.strideB);
  p->c = make_layout(c.dtype, c.M, c.N, c.ldc, c.batch, c.strideC);
  cublasLtMatmulPreference_t pref;
  cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = workspace_bytes_;
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
  uint32_t align = 16;  // what run() checks
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align));
  int found = 0;
  p->candidates.resize(sweep_ > 1 ? sweep_ : 1);
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p->op, p->a, p->b, p->c, p->c, pref,
                                                     (int)p->candidates.size(),
                                                     p->candidates.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p->has_algo = st == CUBLAS_STATUS_SUCCESS && found > 0;
  p->candidates.resize(p->has_algo ? found : 0);
  if (p->has_algo) p->heur = p->candidates[0];
  slot = std::move(p);
  return *slot;
}

// RATCHET_GEMM_SWEEP (matmul.h): times each candidate on this call's own
// operands, writing D into a scratch buffer so that C (read when beta != 0)
// is untouched; the epilogue's side outputs (GELU aux, BGRADB's dbias) are
// overwritten with the same values by every candidate. Keeps the fastest in
// p.heur for the rest of the run and prints one line per shape.
void Matmul::sweep_algos(const LtCall& c, Plan& p) {
  p.swept = true;
  if (p.candidates.size() < 2) return;
  const size_t elem = c.dtype == DType::f32 ? 4 : 2;
  const size_t d_elems = (size_t)c.ldc * c.N + (c.batch > 1 ? (size_t)c.strideC * (c.batch - 1) : 0);
  void* d = device_malloc(d_elems * elem);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  set_epilogue_pointers(p.op, c);
  const int reps = 5;
  std::vector<float> us(p.candidates.size(), -1.f);
  size_t best = 0;
  for (size_t i = 0; i < p.candidates.size(); i++) {
    auto run_once = [&] {
      return cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &c.alpha, c.A, p.a, c.B,
                            p.b, &c.beta, c.C, p.c, d, p.c, &p.candidates[i].algo, workspace_,
                            workspace_bytes_, s);
    };
    if (run_once() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; a refusal drops the candidate
    cudaEventRecord(e0, s);
    for (int r = 0; r < reps; r++) run_once();
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    us[i] = 1000.f * ms / reps;
    if (us[best] < 0 || us[i] < us[best]) best = i;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  device_free(d);
  if (us[best] < 0) return;  // none ran here: keep the heuristic's first
  p.heur = p.candidates[best];
  std::fprintf(stderr, "ratchet: gemm sweep: %s: heuristic #0 %.1f us, fastest #%zu %.1f us (%zu candidates)\n",
               last_range_, us[0], best, us[best], p.candidates.size());
}

const char* Matmul::launch(const LtCall& c, Plan& p) {
  if (sweep_ > 1 && !p.swept) sweep_algos(c, p);
  return launch_one(c, p);
}

const char* Matmul::launch_one(const LtCall& c, Plan& p) {
  // Per-call pointers on the cached descriptor (read when the call is enqueued).
  set_epilogue_pointers(p.op, c);
  const cublasStatus_t st =
      cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &c.alpha, c.A, p.a, c.B, p.b,
                     &c.beta, c.C, p.c, c.C, p.c, &p.heur.algo, workspace_, workspace_bytes_,
                     static_cast<cudaStream_t>(stream_));
  return st == CUBLAS_STATUS_SUCCESS ? nullptr : cublasLtGetStatusString(st);
}
#endif

}  // namespace ratchet::cuda
