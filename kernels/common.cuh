// Shared by every kernel family: the CUDA world (nvcc) or the simt world (g++),
// storage types, check macros, the launch helper, the dynamic shared memory
// accessor, vector loads, warp/block reductions, stochastic rounding.
//
// Kernels are written once and compiled twice:
//   - by nvcc into ratchet_kernels_cuda (sm_80/sm_90), launched with <<<>>>;
//   - by g++ into ratchet_kernels_simt against kernels/simt, which runs a
//     launch on the CPU (one fiber per CUDA thread).
// So kernels use only what simt provides: launches through RATCHET_LAUNCH,
// dynamic shared memory through dynamic_smem<T>(), no inline PTX.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <initializer_list>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/error.h"  // ratchet::check_failed, the one reporter

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "core/cuda_check.h"
#define RATCHET_SIMT 0
#elif defined(RATCHET_KERNELS_CUDA)
// A host-compiled file that calls the nvcc-built launchers (the cuda backend,
// GPU tests): CUDA's declarations, no device code.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#define RATCHET_SIMT 0
#define RATCHET_HOST_ONLY 1
#else
#include "simt/simt.h"
#define RATCHET_SIMT 1
#endif

namespace ratchet::kernels {

using bf16 = __nv_bfloat16;

// ---- checks -------------------------------------------------------------------------
// cudaCheck(call) (core/cuda_check.h, included above): prints the statement,
// cudaGetErrorString, function, file:line, rank, host, device; aborts.
#if !RATCHET_SIMT
// After a launch: the launch itself (bad configuration) failed?
#define RATCHET_CHECK_LAUNCH() cudaCheck(cudaGetLastError())
#else
// Under simt a failed launch (barrier not reached by every thread, bad warp
// collective, exception) throws simt::LaunchError naming the kernel, so that
// tests can observe it.
#define RATCHET_CHECK_LAUNCH() ::simt::check_launch(__FILE__, __LINE__)
#endif

// Launcher preconditions (shapes, alignment): a violated one is a caller bug.
#define RATCHET_REQUIRE(cond, what)                                                    \
  do {                                                                                 \
    if (!(cond))                                                                       \
      ::ratchet::check_failed("kernel precondition", #cond, what, __func__, __FILE__, \
                              __LINE__);                                               \
  } while (0)

// ---- hashing (also for host-compiled callers: the cuda backend's rounding seeds) ----------
// murmur3's 32-bit finaliser: every input bit affects every output bit.
__host__ __device__ __forceinline__ uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

#if !defined(RATCHET_HOST_ONLY)
// ---- NVTX range for a launcher's scope ---------------------------------------------------
struct NvtxRange {
#if !RATCHET_SIMT
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
#else
  explicit NvtxRange(const char*) {}
#endif
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
#define RATCHET_NVTX_RANGE(name) ::ratchet::kernels::NvtxRange nvtx_range_(name)

// ---- launch limits -------------------------------------------------------------------------
// What every launch must respect on the architectures we build for (sm_80,
// sm_90: CUDA C++ Programming Guide, "Technical specifications per compute
// capability"): at most 1024 threads per block, block.z <= 64, grid.x <=
// 2^31 - 1, grid.y and grid.z <= 65535, no zero dimension, and at most 48 KiB
// of dynamic shared memory (more needs cudaFuncSetAttribute, which no kernel
// here uses). Returns "" when (grid, block, smem) is launchable, else what is
// wrong. On a device, launch_kernel also checks the kernel's own limit
// (cudaFuncGetAttributes: maxThreadsPerBlock after its register use).
constexpr unsigned kMaxThreadsPerBlock = 1024, kMaxBlockZ = 64, kMaxGridX = 2147483647u,
                   kMaxGridYZ = 65535;
constexpr size_t kMaxDynamicSmem = 48 * 1024;
inline std::string launch_config_problem(dim3 grid, dim3 block, size_t smem) {
  auto s = [](unsigned long long v) { return std::to_string(v); };
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
    return "a zero grid or block dimension (grid " + s(grid.x) + "x" + s(grid.y) + "x" +
           s(grid.z) + ", block " + s(block.x) + "x" + s(block.y) + "x" + s(block.z) + ")";
  if (threads > kMaxThreadsPerBlock)
    return s(threads) + " threads per block (limit " + s(kMaxThreadsPerBlock) + ")";
  if (block.z > kMaxBlockZ) return "block.z " + s(block.z) + " (limit 64)";
  if (grid.x > kMaxGridX) return "grid.x " + s(grid.x) + " (limit 2^31 - 1)";
  if (grid.y > kMaxGridYZ || grid.z > kMaxGridYZ)
    return "grid.y " + s(grid.y) + ", grid.z " + s(grid.z) + " (limit 65535 each)";
  if (smem > kMaxDynamicSmem)
    return s(smem) + " bytes of dynamic shared memory (limit 48 KiB without opt-in)";
  return "";
}

// Tests: while a LaunchDryRun lives on this thread, launches are checked and
// recorded but not run, so that every launcher's geometry can be exercised at
// the largest shapes `ratchet plan` allows without the memory or the time.
struct LaunchRecord {
  std::string name;
  dim3 grid, block;
  size_t smem;
};
class LaunchDryRun {
 public:
  LaunchDryRun() : prev_(current()) { current() = this; }
  ~LaunchDryRun() { current() = prev_; }
  LaunchDryRun(const LaunchDryRun&) = delete;
  LaunchDryRun& operator=(const LaunchDryRun&) = delete;
  std::vector<LaunchRecord> launches;
  static LaunchDryRun*& current() {
    static thread_local LaunchDryRun* p = nullptr;
    return p;
  }

 private:
  LaunchDryRun* prev_;
};

#if !RATCHET_SIMT
// The kernel's own limits on the current device, looked up once per kernel.
inline void check_kernel_resources(const char* name, const void* fn, dim3 block, size_t smem) {
  static std::mutex mu;
  static std::unordered_map<const void*, cudaFuncAttributes> seen;
  cudaFuncAttributes a;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = seen.find(fn);
    if (it == seen.end()) {
      cudaCheck(cudaFuncGetAttributes(&a, fn));
      it = seen.emplace(fn, a).first;
    }
    a = it->second;
  }
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (threads > (unsigned long long)a.maxThreadsPerBlock)
    ::ratchet::check_failed(
        "launch", name,
        (std::to_string(threads) + " threads per block, but with " + std::to_string(a.numRegs) +
         " registers per thread this kernel allows " + std::to_string(a.maxThreadsPerBlock))
            .c_str(),
        __func__, __FILE__, __LINE__);
  if (smem > (size_t)a.maxDynamicSharedSizeBytes)
    ::ratchet::check_failed("launch", name,
                            (std::to_string(smem) + " bytes of dynamic shared memory, limit " +
                             std::to_string(a.maxDynamicSharedSizeBytes))
                                .c_str(),
                            __func__, __FILE__, __LINE__);
}
#endif

// ---- the launch helper -------------------------------------------------------------------
// RATCHET_LAUNCH(kernel, grid, block, smem_bytes, stream, args...) is
// kernel<<<grid, block, smem_bytes, stream>>>(args...) under nvcc and a simt
// launch under g++. Wrap template kernels in parentheses: (k<float, 4>).
// Follow it with RATCHET_CHECK_LAUNCH(). Every launch is checked first against
// launch_config_problem (both builds) and, on a device, the kernel's limits:
// a bad configuration fails naming the kernel, never launches.
template <class... KArgs, class... Args>
inline void launch_kernel(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                          size_t smem, cudaStream_t stream, Args&&... args) {
  const std::string bad = launch_config_problem(grid, block, smem);
  if (!bad.empty()) ::ratchet::check_failed("launch", name, bad.c_str(), __func__, __FILE__, __LINE__);
  if (LaunchDryRun* d = LaunchDryRun::current()) {
    d->launches.push_back({name, grid, block, smem});
    return;
  }
#if !RATCHET_SIMT
  check_kernel_resources(name, reinterpret_cast<const void*>(kernel), block, smem);
  kernel<<<grid, block, smem, stream>>>(static_cast<KArgs>(args)...);
#else
  (void)stream;
  auto body = [&] { kernel(static_cast<KArgs>(args)...); };
  ::simt::launch(name, grid, block, smem, body);
#endif
}
#define RATCHET_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::ratchet::kernels::launch_kernel(#kernel, kernel, grid, block, smem, stream, __VA_ARGS__)

// Dynamic shared memory of the block (the launch's smem bytes), 16-byte aligned.
template <class T>
__device__ __forceinline__ T* dynamic_smem() {
#if !RATCHET_SIMT
  extern __shared__ __align__(16) unsigned char ratchet_dyn_smem[];
  return reinterpret_cast<T*>(ratchet_dyn_smem);
#else
  return ::simt::dynamic_smem<T>();
#endif
}

// ---- small helpers --------------------------------------------------------------------------
template <class T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Storage <-> FP32. bf16 conversions round to nearest even (CUDA's __float2bfloat16).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16(x);
}

// 16 bytes of T, loaded and stored as one 128-bit access.
template <class T>
struct alignas(16) Packed128 {
  static constexpr int size = 16 / (int)sizeof(T);
  T v[size];
  __device__ __forceinline__ T& operator[](int i) { return v[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};
template <class T>
__device__ __forceinline__ Packed128<T> load128(const T* p) {  // p 16-byte aligned
  return *reinterpret_cast<const Packed128<T>*>(p);
}
template <class T>
__device__ __forceinline__ void store128(T* p, const Packed128<T>& x) {
  *reinterpret_cast<Packed128<T>*>(p) = x;
}

// Element i of a pack as FP32. BF16 is widened from the pack's 32-bit words
// (bf16 is the high half of an FP32), so that a pack held across a loop stays
// in 4 registers instead of one register per element.
__device__ __forceinline__ float pack_f32(const Packed128<float>& p, int i) { return p[i]; }
__device__ __forceinline__ float pack_f32(const Packed128<bf16>& p, int i) {
  uint32_t word;
  memcpy(&word, &p.v[i & ~1], sizeof word);
  return __uint_as_float(i & 1 ? word & 0xFFFF0000u : word << 16);
}

// ---- reductions ---------------------------------------------------------------------------
// Butterfly over the full warp: every lane gets the same, order-fixed result.
__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// Block-wide sum for a 1-D block whose size is a multiple of 32 (at most 1024);
// every thread gets the result. All threads of the block must call it.
// `scratch` holds 32 values in shared memory; it is reused, hence the barriers.
template <class T>
__device__ __forceinline__ T block_sum(T x, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nwarps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < nwarps ? scratch[lane] : T(0);
  return warp_sum(x);
}

// ---- packs: P = 16 / sizeof(T) consecutive elements of a row -----------------------------
// kVec: one 128-bit access (the caller checked 16-byte alignment and that rows
// are whole packs), else element by element. `n` is how many elements from p
// are in range: n <= 0 reads zeros and writes nothing; 0 < n < P (only
// without kVec) reads the first n and zeros after, writes the first n.
// kStream: evict-first loads (__ldcs) for data this kernel reads once.
template <bool kVec, bool kStream = false, class T>
__device__ __forceinline__ Packed128<T> load_pack(const T* p, int n) {
  Packed128<T> r;
  if constexpr (kVec) {
    if (n > 0) {
#if !RATCHET_SIMT
      if constexpr (kStream) {
        const int4 bits = __ldcs(reinterpret_cast<const int4*>(p));
        memcpy(&r, &bits, sizeof r);
        return r;
      }
#endif
      return load128(p);
    }
    for (int k = 0; k < r.size; k++) r[k] = from_f32<T>(0.0f);
  } else {
    for (int k = 0; k < r.size; k++) r[k] = k < n ? p[k] : from_f32<T>(0.0f);
  }
  return r;
}
template <bool kVec, class T>
__device__ __forceinline__ void store_pack(T* p, const Packed128<T>& x, int n) {
  if constexpr (kVec) {
    if (n > 0) store128(p, x);
  } else {
    for (int k = 0; k < x.size; k++)
      if (k < n) p[k] = x[k];
  }
}
// Whether rows of C elements of T can be read as packs at these pointers.
template <class T>
inline bool packs_fit(int C, std::initializer_list<const void*> ptrs) {
  if (C % Packed128<T>::size != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

// ---- column sums of (N, C) in two deterministic passes -------------------------------------
// layernorm_backward, rmsnorm_backward and bias_grad sum columns over the
// rows: pass 1 writes one FP32 partial row per block of rows
// (column_sum_rows_per_block(N) rows, kernels/scratch_bytes.h: a function of
// N only, never of the device) into scratch (blocks, ncols); pass 2
// (column_sums_kernel) adds them into the outputs in a fixed order. No
// atomics: the bits depend on N and C only.
constexpr int kColumnSumWarps = 16;
// out (ncols) += sum over r < rows of partial (rows, ncols); columns < C go to
// out0, columns C..2C-1 to out1 (layernorm's dw | db). Block: 32 columns x
// kColumnSumWarps warps; warp w sums rows w, w + kColumnSumWarps, ... in
// order, then warp 0 adds the warps' sums in warp order.
template <class T>
__global__ void column_sums_kernel(T* __restrict__ out0, T* __restrict__ out1,
                                   const float* __restrict__ partial, int rows, int C,
                                   int ncols) {
  __shared__ float sums[kColumnSumWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int j = blockIdx.x * 32 + lane;
  float s = 0.0f;
  if (j < ncols)
    for (int r = warp; r < rows; r += kColumnSumWarps) s += partial[(size_t)r * ncols + j];
  sums[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || j >= ncols) return;
  float t = 0.0f;
  for (int w = 0; w < kColumnSumWarps; w++) t += sums[w][lane];
  T* o = j < C ? out0 + j : out1 + (j - C);
  *o = from_f32<T>(to_f32(*o) + t);
}
template <class T>
inline void column_sums(T* out0, T* out1, const float* partial, int rows, int C, int ncols,
                        cudaStream_t stream) {
  RATCHET_LAUNCH((column_sums_kernel<T>), (unsigned)ceil_div(ncols, 32), 32 * kColumnSumWarps,
                 0, stream, out0, out1, partial, rows, C, ncols);
  RATCHET_CHECK_LAUNCH();
}

// ---- rows, one warp each --------------------------------------------------------------------
// The norm forward kernels: lane l owns packs l, l + 32, ... of the row, and
// sums its elements pack by pack (the same order with or without kVec, so the
// two paths give the same bits).
// The fused residual + norm kernels: r (C) = a + b stored in T; each lane
// later reads back only the packs it wrote itself, so no barrier is needed.
// r may alias a or b.
template <bool kVec, class T>
__device__ __forceinline__ void residual_add_row(T* r, const T* a, const T* b, int C) {
  constexpr int P = Packed128<T>::size;
  for (int c0 = (threadIdx.x % 32) * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> x = load_pack<kVec, true>(a + c0, C - c0),
                       y = load_pack<kVec, true>(b + c0, C - c0);
    Packed128<T> o;
    for (int k = 0; k < P; k++) o[k] = from_f32<T>(pack_f32(x, k) + pack_f32(y, k));
    store_pack<kVec>(r + c0, o, C - c0);
  }
}

// ---- stochastic rounding FP32 -> BF16 ----------------------------------------------------
// Hash of (index, seed): the random bits that decide rounding, identical on
// device and in simt.
__host__ __device__ __forceinline__ uint32_t hash_u32(uint32_t x, uint32_t seed) {
  return fmix32(x * 0x9E3779B1u ^ seed);
}
// Rounds x to one of the two nearest bf16 values, up with probability equal to
// the distance from the lower one (unbiased in expectation). NaN/Inf pass through.
__device__ __forceinline__ bf16 stochastic_round_bf16(float x, uint32_t random) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return __float2bfloat16(x);
  bits += random & 0xFFFFu;  // carry into the kept bits with probability frac
  bits &= 0xFFFF0000u;
  return __float2bfloat16_rz(__uint_as_float(bits));
}

#endif  // !RATCHET_HOST_ONLY

}  // namespace ratchet::kernels
