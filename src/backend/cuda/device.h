// Device memory, copies and device queries for the cuda backend's host code,
// in one place so that the same host code runs on a real device (nvcc build:
// the CUDA runtime) and under simt (host memory: "device" pointers are host
// pointers, copies are memcpy, streams are null and everything is synchronous).
#pragma once
#include <cstddef>
#include <string>

#include "kernels/common.cuh"  // RATCHET_SIMT, cudaStream_t, bf16

namespace ratchet::cuda {

// 256-byte aligned, NOT zero-filled. Out of memory fails naming the request
// and what is free.
void* device_malloc(size_t bytes);
void device_free(void* p);
void memcpy_h2d(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void memcpy_d2h(void* dst, const void* src, size_t bytes, cudaStream_t stream);  // synchronous
void memcpy_d2d(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void memset_device(void* p, int value, size_t bytes, cudaStream_t stream);
void stream_synchronize(cudaStream_t stream);

// Page-locked ("pinned") host memory, for the checkpoint snapshot of
// --ckpt-async: cudaHostAlloc's memory is what the device's copy engines read
// and write directly (DMA at the bus's speed), and cudaMemcpyAsync into it
// is asynchronous with respect to the host (CUDA Runtime API, "API
// synchronization behavior": a device-to-host copy into PAGEABLE memory
// returns only once the copy has completed). Out of memory (pinned memory is
// limited by the OS) fails naming the request. Under simt: plain host memory.
void* host_pinned_malloc(size_t bytes);
void host_pinned_free(void* p);
// Enqueues a device-to-host copy on `stream` and returns at once when dst is
// pinned; stream_synchronize(stream) waits for it. Under simt: a memcpy.
void memcpy_d2h_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);

struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t total_bytes = 0, free_bytes = 0;
};
// Whether a usable device exists. On false, *why says what the runtime said
// (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient ...").
bool device_available(std::string* why);
DeviceInfo device_info();  // the current device (under simt: the host, "simt (CPU)")

// Dense BF16 tensor-core peak of a device by name, in TFLOP/s (A100 312,
// H100 SXM 989, H200 989, ...); 0 when unknown (then --peak-tflops).
double bf16_peak_tflops(const std::string& device_name);

// Peak memory bandwidth of a device by name, in GB/s (1e9 bytes: H100 SXM
// 3350, H200 4800, ...); 0 when unknown. `train --profile`'s roofline.
double peak_memory_gbps(const std::string& device_name);

}  // namespace ratchet::cuda
