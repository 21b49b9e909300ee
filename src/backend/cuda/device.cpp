// See device.h.
#include "backend/cuda/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#if RATCHET_SIMT
#include "kernels/simt/device_guard.h"
#endif

namespace ratchet::cuda {

#if RATCHET_SIMT

// Host memory from simt's allocator: with RATCHET_SIMT_GUARD=1 it is
// unreadable outside kernels and these copies (kernels/simt/device_guard.h).
void* device_malloc(size_t bytes) {
  void* p = simt::device_alloc(bytes);
  if (!p) fail("simt device: out of host memory allocating ", bytes, " bytes");
  return p;
}
void device_free(void* p) { simt::device_free(p); }
void memcpy_h2d(void* dst, const void* src, size_t bytes, cudaStream_t) {
  simt::DeviceAccess device;
  if (bytes) std::memcpy(dst, src, bytes);
}
void memcpy_d2h(void* dst, const void* src, size_t bytes, cudaStream_t) {
  simt::DeviceAccess device;
  if (bytes) std::memcpy(dst, src, bytes);
}
void memcpy_d2d(void* dst, const void* src, size_t bytes, cudaStream_t) {
  simt::DeviceAccess device;
  if (bytes) std::memmove(dst, src, bytes);
}
void memset_device(void* p, int value, size_t bytes, cudaStream_t) {
  simt::DeviceAccess device;
  if (bytes) std::memset(p, value, bytes);
}
void stream_synchronize(cudaStream_t) {}
// simt has no page-locked memory: plain host memory (not simt's device
// allocator, so RATCHET_SIMT_GUARD leaves the host's reads of it alone).
void* host_pinned_malloc(size_t bytes) {
  void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (!p) fail("simt: out of host memory allocating ", bytes, " bytes of (pinned) host memory");
  return p;
}
void host_pinned_free(void* p) { std::free(p); }
void memcpy_d2h_async(void* dst, const void* src, size_t bytes, cudaStream_t) {
  simt::DeviceAccess device;
  if (bytes) std::memcpy(dst, src, bytes);
}

bool device_available(std::string*) { return true; }

DeviceInfo device_info() {
  DeviceInfo d;
  d.name = "simt (CPU)";
  // "free device memory" under simt: MemAvailable of the host.
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string key;
    size_t kb = 0;
    is >> key >> kb;
    if (key == "MemTotal:") d.total_bytes = kb * 1024;
    if (key == "MemAvailable:") d.free_bytes = kb * 1024;
  }
  return d;
}

#else

void* device_malloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    fail("cudaMalloc of ", bytes, " bytes failed (", cudaGetErrorString(e), "); the device has ",
         free_b >> 20, " MiB free of ", total_b >> 20,
         " MiB: lower --batch-size (or use --batch-size auto) or a smaller model");
  }
  return p;
}
void device_free(void* p) { cudaCheck(cudaFree(p)); }
void memcpy_h2d(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
}
void memcpy_d2h(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (!bytes) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  cudaCheck(cudaStreamSynchronize(s));
}
void memcpy_d2d(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}
void memset_device(void* p, int value, size_t bytes, cudaStream_t s) {
  if (bytes) cudaCheck(cudaMemsetAsync(p, value, bytes, s));
}
void stream_synchronize(cudaStream_t s) { cudaCheck(cudaStreamSynchronize(s)); }
void* host_pinned_malloc(size_t bytes) {
  void* p = nullptr;
  // cudaHostAllocDefault: page-locked, usable by the current device's copies.
  cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("cudaHostAlloc of ", bytes, " bytes of pinned host memory failed (",
         cudaGetErrorString(e), "): the host's page-locked memory is exhausted (ulimit -l, or "
         "the host's RAM); run without --ckpt-async, or on more ranks (smaller shards)");
  }
  return p;
}
void host_pinned_free(void* p) {
  // Called from destructors (HostSnapshot): an error is dropped, never thrown.
  if (p && cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}
void memcpy_d2h_async(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
}

bool device_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    if (why) *why = "cudaGetDeviceCount: no CUDA device visible";
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  DeviceInfo d;
  int dev = 0;
  cudaCheck(cudaGetDevice(&dev));
  cudaDeviceProp p;
  cudaCheck(cudaGetDeviceProperties(&p, dev));
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  cudaCheck(cudaMemGetInfo(&d.free_bytes, &d.total_bytes));
  return d;
}

#endif

double bf16_peak_tflops(const std::string& name) {
  // Dense (no sparsity) BF16 tensor-core peaks from the vendor data sheets.
  struct Entry {
    const char* substr;
    double tflops;
  };
  static const Entry table[] = {
      {"H200", 989.0},     {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.0},
      {"GH200", 989.0},    {"B200", 2250.0},     {"A100", 312.0},     {"A800", 312.0},
      {"A10G", 70.0},      {"A10", 125.0},       {"A30", 165.0},      {"L40S", 362.0},
      {"L40", 181.0},      {"L4", 121.0},        {"RTX 4090", 165.0}, {"RTX 3090", 71.0},
      {"RTX A6000", 155.0}};
  for (const Entry& e : table)
    if (name.find(e.substr) != std::string::npos) return e.tflops;
  return 0.0;
}

double peak_memory_gbps(const std::string& name) {
  // HBM/GDDR peaks from the vendor data sheets. The first entry whose text
  // the device name contains wins, so the specific names come first ("GH200"
  // before "H200", "A100" before "A10", "L40" before "L4").
  struct Entry {
    const char* substr;
    double gbps;
  };
  static const Entry table[] = {
      {"GH200", 4000.0},         {"H200", 4800.0},          {"H100 PCIe", 2000.0},
      {"H100 NVL", 3900.0},      {"H100", 3350.0},          {"B200", 8000.0},
      {"A100-SXM4-80GB", 2039.0}, {"A100 80GB PCIe", 1935.0}, {"A100", 1555.0},
      {"A800", 2039.0},          {"A10G", 600.0},           {"A10", 600.0},
      {"A30", 933.0},            {"L40S", 864.0},           {"L40", 864.0},
      {"L4", 300.0},             {"RTX 4090", 1008.0},      {"RTX 3090", 936.0},
      {"RTX A6000", 768.0}};
  for (const Entry& e : table)
    if (name.find(e.substr) != std::string::npos) return e.gbps;
  return 0.0;
}

}  // namespace ratchet::cuda
