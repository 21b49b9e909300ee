// Every kernel on the real device (nvcc build) against the CPU backend: the
// cases of tests/simt/kernel_cases.h with device memory. Skips without a device
// (cudaGetDeviceCount fails, e.g. error 35 "driver version is insufficient"
// on machines with the toolkit but no GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "kernel_cases.h"

namespace {

using namespace ratchet::testing::kcases;

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_);              \
  } while (0)

bool have_device() {
  static int result = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      std::printf("no CUDA device: cudaGetDeviceCount failed with %d (%s)\n", (int)e,
                  cudaGetErrorString(e));
      return 0;
    }
    return n > 0 ? 1 : 0;
  }();
  return result != 0;
}

// Device buffers with guard regions (filled with 0xA5) on both sides.
struct CudaMem {
  static constexpr size_t kGuard = 256;
  struct Buf {
    unsigned char* base;
    size_t bytes;
  };
  std::vector<Buf> bufs;
  ~CudaMem() {
    for (auto& b : bufs) cudaFree(b.base);
  }
  template <class T>
  T* alloc(size_t n) {
    size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
    unsigned char* p = nullptr;
    if (cudaMalloc(&p, bytes + 2 * kGuard) != cudaSuccess) throw std::runtime_error("cudaMalloc");
    cudaMemset(p, 0xA5, kGuard);
    cudaMemset(p + kGuard, 0, bytes);
    cudaMemset(p + kGuard + bytes, 0xA5, kGuard);
    bufs.push_back({p, bytes});
    return reinterpret_cast<T*>(p + kGuard);
  }
  void upload(void* dst, const void* src, size_t bytes) {
    cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  void download(void* dst, const void* src, size_t bytes) {
    cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  void sync() {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
  }
  std::string check_guards() {
    sync();
    std::vector<unsigned char> g(kGuard);
    for (size_t i = 0; i < bufs.size(); i++) {
      for (int side = 0; side < 2; side++) {
        const unsigned char* p = bufs[i].base + (side ? kGuard + bufs[i].bytes : 0);
        cudaMemcpy(g.data(), p, kGuard, cudaMemcpyDeviceToHost);
        for (size_t j = 0; j < kGuard; j++)
          if (g[j] != 0xA5)
            return "buffer #" + std::to_string(i) + ": guard " + (side ? "after" : "before") +
                   " the buffer overwritten";
      }
    }
    return "";
  }
};

struct GpuKernels : ::testing::TestWithParam<Case> {};

TEST_P(GpuKernels, MatchesCpuBackend) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  CudaMem mem;
  Report r = run_case(mem, GetParam());
  std::printf("%s\n%s", case_name(GetParam()).c_str(), r.text().c_str());
  EXPECT_TRUE(r.ok) << r.text();
}

INSTANTIATE_TEST_SUITE_P(Ops, GpuKernels, ::testing::ValuesIn(all_cases()), case_test_name);

}  // namespace
