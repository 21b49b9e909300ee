// CpuBackend construction, memory, per-thread scratch and the sgemm helper.
//
// Memory: alloc() returns 64-byte-aligned, zero-filled host memory (size
// rounded up to 64 bytes), counted per block for bytes_in_use(); uploads and
// downloads are plain copies since the storage dtype is FP32.
//
// gemm(): C (M,N) = alpha op(A) op(B) + beta C (row-major, cblas conventions).
// The larger of M and N is cut into one contiguous block per OpenMP thread
// (block edges on multiples of 16, the sgemm micro-kernel width), and each
// thread runs a single-threaded cblas_sgemm on its block. Every element of C
// is then reduced over K inside one sgemm call, so results are deterministic.
// One thread pool (OpenMP) serves both the GEMMs and the element-wise loops.
// Measured on 2 cores, 12 layers of GPT-2 124M matmuls (B*T=256) interleaved
// with OpenMP element-wise loops: this scheme ran at 174 GFLOP/s; letting
// OpenBLAS thread each sgemm with its own pthread pool ran at 52 GFLOP/s, as
// the two pools' spinning workers fought over the cores between ops.
// (OMP_WAIT_POLICY=passive lifts the latter to 155 but halves this scheme to
// 87: every parallel region then pays a futex wake-up.)
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

// Declared by OpenBLAS's cblas.h, but not by every cblas.h.
extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);

namespace ratchet {

CpuBackend::CpuBackend(int threads) {
  threads_ = threads > 0 ? threads : omp_get_num_procs();
  omp_set_num_threads(threads_);
  // Inside our OpenMP regions each sgemm must run on its calling thread.
  openblas_set_num_threads(1);
}

void CpuBackend::blas_single_thread() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

CpuBackend::~CpuBackend() { std::free(scratch_); }

void* CpuBackend::alloc(size_t bytes) {
  const size_t rounded = alloc_size(bytes);
  void* p = std::aligned_alloc(64, rounded);
  if (!p)
    fail("out of host memory: ", rounded / 1e6, " MB could not be allocated (", bytes_in_use_ / 1e6,
         " MB already in use): lower --batch-size or --seq-len, or use --recompute blocks");
  std::memset(p, 0, rounded);
  alloc_sizes_[p] = rounded;
  bytes_in_use_ += rounded;
  return p;
}

void CpuBackend::release(void* p) {
  auto it = alloc_sizes_.find(p);
  if (it != alloc_sizes_.end()) {
    bytes_in_use_ -= it->second;
    alloc_sizes_.erase(it);
  }
  std::free(p);
}

void CpuBackend::zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}

void CpuBackend::upload_f32(dptr dst, const float* src, size_t n) {
  if (n) std::memcpy(dst, src, n * sizeof(float));
}

void CpuBackend::download_f32(float* dst, cdptr src, size_t n) {
  if (n) std::memcpy(dst, src, n * sizeof(float));
}

void CpuBackend::upload_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::download_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

float* CpuBackend::scratch(size_t floats_per_thread) {
  size_t stride = (floats_per_thread + 15) / 16 * 16;  // keep each slice 64-byte aligned
  if (stride > scratch_stride_) {
    std::free(scratch_);
    scratch_ = static_cast<float*>(std::aligned_alloc(64, stride * threads_ * sizeof(float)));
    RATCHET_ASSERT(scratch_ != nullptr);
    scratch_stride_ = stride;
  }
  return scratch_;
}

void CpuBackend::gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A,
                      int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  blas_single_thread();
  const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
  const bool split_m = M > N;
  const int len = split_m ? M : N;
  // Blocks of at least 64 rows/columns each; fewer threads for small GEMMs.
  const int parts = std::max(1, std::min(threads_, len / 64));
  if (parts == 1) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int p = 0; p < parts; p++) {
    // [lo, hi) of the split dimension, edges rounded to multiples of 16.
    int lo = (int)((long)len * p / parts) / 16 * 16;
    int hi = p == parts - 1 ? len : (int)((long)len * (p + 1) / parts) / 16 * 16;
    if (hi <= lo) continue;
    if (split_m) {
      const float* a = transA ? A + lo : A + (size_t)lo * lda;
      cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, alpha, a, lda, B, ldb, beta,
                  C + (size_t)lo * ldc, ldc);
    } else {
      const float* b = transB ? B + (size_t)lo * ldb : B + lo;
      cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
    }
  }
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace ratchet
