// The expert-parallel exchange a MoE layer calls when its experts are sharded
// over P ranks (issue 39 item 4; distributed/expert_parallel.h implements it
// over a Communicator). Rank q of the P holds experts [q·E/P, (q+1)·E/P).
// Every call is collective over the P ranks, in the same order on each.
// The cpu ops call counts() and rows() (host memory); the cuda ops call
// counts() with host counts and device_rows() with the backend's storage
// (device memory: NCCL's grouped send/recv on a GPU).
#pragma once
#include <cstddef>

namespace ratchet {

class MoeExchange {
 public:
  virtual ~MoeExchange() = default;
  virtual int size() const = 0;  // P, the ranks the experts are sharded over
  virtual int rank() const = 0;  // this rank's place among them
  // --moe-ep-capacity F: the MoE states reserve ceil(F·N·k) received rows
  // (BackendMemoryModel::moe_state_bytes counts the same); a run's setting.
  double capacity = 2.0;
  // send (P·n) -> recv (P·n): block q of send goes to rank q (all_to_all).
  virtual void counts(const int* send, int* recv, int n) = 0;
  // Rows of floats: block q of send (send_counts[q] floats) goes to rank q;
  // block p of recv (recv_counts[p] floats) came from rank p (all_to_allv).
  virtual void rows(const float* send, const size_t* send_counts, float* recv,
                    const size_t* recv_counts) = 0;
  // As rows(), on buffers in a device backend's memory and storage type
  // (elem_bytes 4: FP32, 2: BF16), counts in elements. Default: an Error
  // (an exchange without a device path).
  virtual void device_rows(const void* send, const size_t* send_counts, void* recv,
                           const size_t* recv_counts, int elem_bytes);
};

}  // namespace ratchet
