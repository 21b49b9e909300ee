// The NCCL communicator: collectives on DEVICE buffers, bootstrapped over a
// host communicator (MPI): rank 0 creates the ncclUniqueId and broadcasts it,
// every rank picks its GPU from its local rank, then ncclCommInitRank.
// Built only as the ratchet_nccl library (cmake/nccl.cmake: CUDA + NCCL + MPI);
// include only when RATCHET_HAVE_NCCL is defined.
// How it bootstraps, warms up, aborts and uses streams: nccl_communicator.cpp.
#pragma once
#ifdef RATCHET_HAVE_NCCL
#include <nccl.h>

#include <memory>
#include <string>

#include "core/cuda_check.h"

#include "distributed/communicator.h"

namespace ratchet {

// NCCL's text for a result, with ncclGetLastError's detail for `comm` (which
// may be null before a communicator exists): ncclCheck's detail.
struct NcclErrorText {
  ncclComm_t comm = nullptr;
  std::string operator()(ncclResult_t r) const;
};

// Rank 0 creates the unique id; the host communicator broadcasts it.
ncclUniqueId nccl_bootstrap_id(Communicator& host);
// The device for a local rank (device_for_local_rank over the visible
// devices). Fails (Error) when there is no usable device, or when the node has
// more ranks than visible devices.
int nccl_pick_device(int local_rank, int local_world);
// Sets the device, bootstraps and creates the NCCL communicator. `host` must
// outlive the result.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host);
// Makes local_rank's device current, so that the backend allocates on it;
// nothing when no device is usable (the backend says so); an Error when the
// node has more ranks than devices.
void nccl_select_device(int local_rank, int local_world);
// Registers the two above as the device communicator (distributed/communicator.h).
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
