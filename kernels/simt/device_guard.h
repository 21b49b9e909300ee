// simt's device-memory guard: makes a host access to "device" memory fault.
//
// Under simt, device memory is host memory: host code that dereferences a
// pointer the cuda backend owns (a memmove of gradients in a communicator, a
// loop over a parameter shard) works here and segfaults on a GPU. With the
// guard on (env RATCHET_SIMT_GUARD=1, read once; or set_guard before the
// first allocation), device allocations are their own mmap'ed pages, kept
// PROT_NONE except inside a DeviceAccess scope: a kernel launch
// (simt::launch_erased), a device copy or memset (backend/cuda/device.cpp),
// or a stand-in for device-side code (the cuBLASLt stand-in, a stand-in NCCL).
// Any other host access then faults, and a SIGSEGV handler names the
// allocation hit and prints a backtrace before the process dies of the
// signal (exit status 139 from a shell).
//
// Off (the default), device_alloc is aligned_alloc and DeviceAccess is free.
// On, each scope's first entry mprotects every live allocation (a trained
// tiny model's arena is one), so the guard is for tests, not speed.
// Scopes nest and count across threads: while one thread is inside a scope,
// device memory is readable by all (simt runs one launch at a time).
#pragma once
#include <cstddef>

namespace simt {

bool guard_enabled();
// Turns the guard on or off; only before the first device_alloc (tests).
void set_guard(bool on);

// `bytes` (at least 1) of device memory, 256-byte aligned, NOT zero-filled
// (guarded: zero pages). nullptr when out of memory.
void* device_alloc(size_t bytes);
void device_free(void* p);

// Device memory is accessible while one of these lives.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

 private:
  bool on_;
};

}  // namespace simt
