// The host copy of one rank's checkpoint shard (FP32 parameters, AdamW m and
// v of its ranges), taken by a save before its files are written: with
// --ckpt-async the step loop waits for this copy only, and a writer thread
// writes the files from it while training goes on.
//
// The memory is the backend's alloc_host_pinned (backend/backend.h): on the
// cuda backend page-locked (cudaHostAlloc), so that the device-to-host copies
// are DMA at the bus's speed and can be enqueued without waiting for each
// (download_bytes_async, then one synchronize()); plain host memory on the
// cpu backend and under simt. Pinning is slow to set up and the OS limits
// it, so one block is allocated for the three tensors and kept from save to
// save; it is reallocated only when a larger shard needs it (a rank's ranges
// are fixed for a run: once per run, in practice).
#pragma once
#include <cstddef>

#include "backend/backend.h"
#include "core/error.h"

namespace ratchet {

class HostSnapshot {
 public:
  HostSnapshot() = default;
  HostSnapshot(const HostSnapshot&) = delete;
  HostSnapshot& operator=(const HostSnapshot&) = delete;
  ~HostSnapshot() { release(); }

  // Room for n floats in each of the three tensors, from `be` (the backend
  // whose memory is copied from; the same one at every call). Keeps the
  // block when it is large enough; its contents are left uninitialised (the
  // copies fill them). Out of memory: an Error naming the size.
  void reserve(Backend& be, size_t n) {
    if (n <= capacity_ && be_ == &be && block_) return;
    release();
    const size_t bytes = 3 * n * sizeof(float);
    block_ = static_cast<float*>(be.alloc_host_pinned(bytes));
    if (!block_)
      fail("out of host memory for the checkpoint snapshot (", bytes / 1e6,
           " MB: this rank's shard of the parameters and moments)");
    be_ = &be;
    capacity_ = n;
  }
  float* params() { return block_; }
  float* m() { return block_ + capacity_; }
  float* v() { return block_ + 2 * capacity_; }
  size_t capacity() const { return capacity_; }  // floats per tensor
  bool pinned() const { return be_ && block_ && be_->host_memory_pinned(); }

 private:
  void release() {
    if (block_) be_->free_host_pinned(block_);
    block_ = nullptr;
    capacity_ = 0;
  }
  Backend* be_ = nullptr;
  float* block_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace ratchet
