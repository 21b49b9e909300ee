// cuBLASLt, loaded on first use instead of at program start.
//
// Why: libcublasLt's load-time initialisers cost about 58 ms of CPU in every
// process that links it (measured: `perf stat /bin/true` with and without
// LD_PRELOAD=libcublasLt.so.13, 0.6 vs 58.5 ms), the CPU backend's runs and
// every `ratchet plan/report/sweep` included. A sweep starts `ratchet train`
// once per trial segment. So the real cuda backend's build does not link the
// library; these definitions of the cuBLASLt functions that matmul.cpp calls
// dlopen it the first time one is called (the first cuda backend) and
// forward to it. Declarations come from cublasLt.h, so a signature that
// differs from the header does not compile.
//
// The library: its soname for this toolkit's major version, through the
// executable's run path, else the file CMake found at build time
// (RATCHET_CUBLASLT_FILE).
#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace {

void* cublaslt_library() {
  static void* lib = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = dlerror();
      lib = dlopen(RATCHET_CUBLASLT_FILE, RTLD_NOW | RTLD_LOCAL);
      if (!lib) error += std::string("; ") + dlerror();
    }
  });
  if (!lib)
    ratchet::fail("the cuda backend needs cuBLASLt but it cannot be loaded (", error,
                  "): check the CUDA toolkit install or LD_LIBRARY_PATH, or use --device cpu");
  return lib;
}

// The library's own definition of `name`, of the type of our declaration.
template <typename F>
F real(F, const char* name) {
  void* p = dlsym(cublaslt_library(), name);
  if (!p)
    ratchet::fail("cuBLASLt (", "libcublasLt.so.", CUBLAS_VER_MAJOR, ") has no ", name,
                  ": the library does not match this build's CUDA toolkit");
  return reinterpret_cast<F>(p);
}

}  // namespace

// Each forwards to the library's function, resolved once.
#define RATCHET_LT(name) static const auto fn = real(&::name, #name); return fn

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* h) {
  RATCHET_LT(cublasLtCreate)(h);
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t h) {
  RATCHET_LT(cublasLtDestroy)(h);
}
const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t s) {
  RATCHET_LT(cublasLtGetStatusString)(s);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                           const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t a, const void* B,
                                           cublasLtMatrixLayout_t b, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t c, void* D,
                                           cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo,
                                           void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  RATCHET_LT(cublasLtMatmul)(h, op, alpha, A, a, B, b, beta, C, c, D, d, algo, workspace,
                             workspace_bytes, stream);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType t,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  RATCHET_LT(cublasLtMatrixLayoutCreate)(l, t, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  RATCHET_LT(cublasLtMatrixLayoutDestroy)(l);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t bytes) {
  RATCHET_LT(cublasLtMatrixLayoutSetAttribute)(l, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  RATCHET_LT(cublasLtMatmulDescCreate)(d, compute, scale);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  RATCHET_LT(cublasLtMatmulDescDestroy)(d);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  RATCHET_LT(cublasLtMatmulDescSetAttribute)(d, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  RATCHET_LT(cublasLtMatmulPreferenceCreate)(p);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  RATCHET_LT(cublasLtMatmulPreferenceDestroy)(p);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  RATCHET_LT(cublasLtMatmulPreferenceSetAttribute)(p, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  RATCHET_LT(cublasLtMatmulAlgoGetHeuristic)(h, op, a, b, c, d, pref, requested, results,
                                             returned);
}

}  // extern "C"
