// The NCCL communicator: collectives on DEVICE buffers, bootstrapped over a
// host communicator (MPI): rank 0 creates the ncclUniqueId and broadcasts it,
// every rank picks its GPU from its local rank, then ncclCommInitRank.
// Built only as the ratchet_nccl library (dist/nccl.cmake: CUDA + NCCL + MPI);
// include only when RATCHET_HAVE_NCCL is defined.
//
// Streams. The compute stream is the one the cuda backend launches on: the
// legacy default stream (CudaBackend's stream_ is null). Every collective runs
// on the communicator's own stream after an event recorded on the compute
// stream (so it sees the gradients the backward just produced). Blocking
// collectives then synchronise the communication stream before returning;
// all_reduce_async() returns at once, and wait_all() makes the compute stream
// wait for the communication stream (the host does not block): the backward
// of the layers below overlaps the all-reduce of the layers above (dist/zero.h).
// DType::BF16 is ncclBfloat16, ReduceOp::Avg is ncclAvg.
// agree(), barrier() and abort_job() go through the host communicator: flags
// live on the host.
#pragma once
#ifdef RATCHET_HAVE_NCCL
#include <nccl.h>

#include <memory>
#include <string>

#include "core/cuda_check.h"

#include "dist/communicator.h"

namespace ratchet {

// NCCL's text for a result, with ncclGetLastError's detail for `comm` (which
// may be null before a communicator exists): ncclCheck's detail.
struct NcclErrorText {
  ncclComm_t comm = nullptr;
  std::string operator()(ncclResult_t r) const;
};

// Rank 0 creates the unique id; the host communicator broadcasts it.
ncclUniqueId nccl_bootstrap_id(Communicator& host);
// The device for a local rank: local_rank modulo the visible devices.
// Fails (Error) when there is no usable device.
int nccl_pick_device(int local_rank);
// Sets the device, bootstraps and creates the NCCL communicator. `host` must
// outlive the result.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host);
// Makes local_rank's device current (cudaSetDevice(local_rank % devices)),
// so that the backend allocates on it; nothing when no device is usable.
void nccl_select_device(int local_rank);
// Registers the two above as the device communicator (dist/communicator.h).
void register_nccl_communicator();

ncclDataType_t nccl_dtype(DType t);
ncclRedOp_t nccl_op(ReduceOp op);

}  // namespace ratchet

// core/error.h's family. ncclGetLastError needs a communicator (may be null
// before one exists).
#define ncclCheckComm(stmt, comm) \
  RATCHET_CHECK_STATUS("nccl", stmt, ncclSuccess, ::ratchet::NcclErrorText{comm})
#define ncclCheck(stmt) ncclCheckComm(stmt, nullptr)
#endif  // RATCHET_HAVE_NCCL
