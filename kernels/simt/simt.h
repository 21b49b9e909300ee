// simt: run CUDA kernel source on the CPU.
//
// A kernel .cu compiled by g++ (not nvcc) includes this header (through
// kernels/common.cuh) instead of the CUDA runtime. It provides what the
// kernels use of CUDA C++, with the same semantics:
//   - threadIdx, blockIdx, blockDim, gridDim, warpSize
//   - __syncthreads (a real block barrier), __syncwarp
//   - __shfl_sync, __shfl_xor_sync, __shfl_down_sync, __shfl_up_sync (with the
//     PTX segment/clamp rules for `width`), __ballot_sync, __any_sync, __all_sync
//   - static __shared__ (per block) and dynamic shared memory (simt::dynamic_smem)
//   - atomics (real atomics: blocks run on several OS threads)
//   - __nv_bfloat16 / __half and the vector types from CUDA's own headers,
//     which compile for the host with CUDA's rounding semantics
//   - the math intrinsics kernels use (__expf, rsqrtf, __fdividef, ...)
//
// Execution model (kernels/simt/simt.cpp): every CUDA thread is a fiber
// (Boost.Context). A block runs on one OS thread until it completes; blocks of a
// grid are spread over a small pool of OS threads. A fiber runs until it reaches
// a synchronisation point (block barrier or warp collective); the block
// scheduler then picks the next runnable fiber at random (seeded: see
// set_seed), so code that relies on an order CUDA does not promise (a missing
// __syncthreads, a warp op with the wrong width) produces wrong results in tests.
// A barrier or warp collective that can never complete (some thread exited or
// waits elsewhere) is reported as a launch error naming the kernel, not a hang.
//
// Static __shared__ is `static thread_local`: all fibers of a block run on one
// OS thread and a block finishes before that thread starts another, so each
// block sees exactly one instance. Like CUDA shared memory it is NOT
// initialised per block (it holds the previous block's values); dynamic shared
// memory is filled with 0xFF bytes (NaN for floats) before every block.
#pragma once

#if defined(__CUDACC__)
#error "simt.h is for host compilers; nvcc builds use the CUDA runtime"
#endif

// Defined before CUDA's headers, which keep definitions that already exist.
#define __host__
#define __device__
#define __global__
#define __shared__ static thread_local
#define __constant__ static const
#define __managed__

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <driver_types.h>  // cudaError_t, cudaStream_t
#include <vector_functions.h>
#include <vector_types.h>

#undef __launch_bounds__
#define __launch_bounds__(...)

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace simt {

// ---- runtime control -----------------------------------------------------------
// Seed of the thread-order shuffle. Default: env RATCHET_SIMT_SEED, else 1.
void set_seed(uint64_t seed);
uint64_t seed();
// OS threads that execute blocks (default: env RATCHET_SIMT_THREADS, else the
// number of cores, at most 8).
void set_threads(int n);
int threads();

// Error of the most recent failed launch (sticky until get_last_error()):
// cudaSuccess or cudaErrorLaunchFailure, plus a message naming the kernel.
cudaError_t peek_last_error();
cudaError_t get_last_error();  // returns and clears, like cudaGetLastError
const std::string& last_error_message();
// Throws LaunchError if the last launch failed (and clears the error).
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void check_launch(const char* file, int line);

// Type-erased launch: runs body(arg) once per thread of every block.
// Returns cudaSuccess or cudaErrorLaunchFailure (message in last_error_message).
cudaError_t launch_erased(const char* name, dim3 grid, dim3 block, size_t dyn_smem,
                          void (*body)(void*), void* arg);

template <class F>
cudaError_t launch(const char* name, dim3 grid, dim3 block, size_t dyn_smem, F&& f) {
  using Fn = std::remove_reference_t<F>;
  return launch_erased(
      name, grid, block, dyn_smem, [](void* p) { (*static_cast<Fn*>(p))(); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// ---- what device code sees ------------------------------------------------------
namespace detail {

struct Block;
struct ThreadCtx {
  uint3 tid;  // threadIdx
  int lane;   // linear thread id % 32
  int warp;   // linear thread id / 32
  Block* block;
};
struct BlockInfo {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  void* dyn_smem;
  size_t dyn_smem_bytes;
};

extern __thread ThreadCtx* tls_thread;  // the running fiber's thread
extern __thread BlockInfo* tls_block;   // the running block

enum class WarpOp : int { sync, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all };

// Block barrier: returns when every thread of the block has arrived.
void syncthreads();
// Warp collective: deposits `value` and `param`; returns this lane's result
// once every lane of `mask` has arrived with the same op and mask.
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width);
// Marks the running block as failed (message names kernel and thread) and
// leaves the fiber for good.
[[noreturn]] void device_fail(const std::string& what);

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles move types of at most 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

}  // namespace detail

// Dynamic shared memory of the running block (the size given at launch).
template <class T>
T* dynamic_smem() {
  return static_cast<T*>(detail::tls_block->dyn_smem);
}

}  // namespace simt

#define threadIdx (::simt::detail::tls_thread->tid)
#define blockIdx (::simt::detail::tls_block->block_idx)
#define blockDim (::simt::detail::tls_block->block_dim)
#define gridDim (::simt::detail::tls_block->grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { ::simt::detail::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::simt::detail::warp_collective(::simt::detail::WarpOp::sync, mask, 0, 0, 32);
}

template <class T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_idx, mask, to_bits(var), srcLane, width));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_up, mask, to_bits(var), (int)delta, width));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_down, mask, to_bits(var), (int)delta, width));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32) {
  using namespace ::simt::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_xor, mask, to_bits(var), laneMask, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  using namespace ::simt::detail;
  return (unsigned)warp_collective(WarpOp::ballot, mask, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred) {
  using namespace ::simt::detail;
  return (int)warp_collective(WarpOp::any, mask, pred != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int pred) {
  using namespace ::simt::detail;
  return (int)warp_collective(WarpOp::all, mask, pred != 0, 0, 32);
}

// ---- atomics: real atomics (blocks of one grid run on several OS threads) ----------
namespace simt::detail {
template <class T, class F>
inline T atomic_update(T* addr, F f) {  // CAS loop on the bit pattern
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4- or 8-byte atomics");
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  U* p = reinterpret_cast<U*>(addr);
  U old_bits = __atomic_load_n(p, __ATOMIC_RELAXED);
  for (;;) {
    T old_v;
    std::memcpy(&old_v, &old_bits, sizeof(T));
    T new_v = f(old_v);
    U new_bits;
    std::memcpy(&new_bits, &new_v, sizeof(T));
    if (__atomic_compare_exchange_n(p, &old_bits, new_bits, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED))
      return old_v;
  }
}
}  // namespace simt::detail

inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* a, unsigned v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float* a, float v) {
  return ::simt::detail::atomic_update(a, [v](float o) { return o + v; });
}
inline double atomicAdd(double* a, double v) {
  return ::simt::detail::atomic_update(a, [v](double o) { return o + v; });
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline int atomicMax(int* a, int v) {
  return ::simt::detail::atomic_update(a, [v](int o) { return o > v ? o : v; });
}
inline int atomicMin(int* a, int v) {
  return ::simt::detail::atomic_update(a, [v](int o) { return o < v ? o : v; });
}
inline unsigned atomicMax(unsigned* a, unsigned v) {
  return ::simt::detail::atomic_update(a, [v](unsigned o) { return o > v ? o : v; });
}
inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* a, unsigned v) {
  return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicExch(float* a, float v) {
  return ::simt::detail::atomic_update(a, [v](float) { return v; });
}
template <class T>
inline T simt_atomic_cas(T* a, T compare, T val) {
  __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value either way
}
inline int atomicCAS(int* a, int c, int v) { return simt_atomic_cas(a, c, v); }
inline unsigned atomicCAS(unsigned* a, unsigned c, unsigned v) { return simt_atomic_cas(a, c, v); }
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c,
                                    unsigned long long v) {
  return simt_atomic_cas(a, c, v);
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short c, unsigned short v) {
  return simt_atomic_cas(a, c, v);
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- math intrinsics (float, with the fast variants mapped to libm) ---------------
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanhf(float x) { return std::tanh(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

// Cache-hinted loads and stores are plain accesses on the CPU.
template <class T>
inline T __ldg(const T* p) { return *p; }
template <class T>
inline T __ldcs(const T* p) { return *p; }
template <class T>
inline T __ldcg(const T* p) { return *p; }
template <class T>
inline void __stcs(T* p, T v) { *p = v; }
template <class T>
inline void __stcg(T* p, T v) { *p = v; }

[[noreturn]] inline void __trap() { ::simt::detail::device_fail("__trap() called"); }
