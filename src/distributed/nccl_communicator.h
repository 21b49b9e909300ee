// The NCCL communicator: collectives on DEVICE buffers, bootstrapped over a
// host communicator (MPI): rank 0 creates the ncclUniqueId and broadcasts it,
// every rank picks its GPU from its local rank, then ncclCommInitRank.
// Built only as the ratchet_nccl library (distributed/nccl.cmake: CUDA + NCCL + MPI);
// include only when RATCHET_HAVE_NCCL is defined.
//
// Bootstrap order (nccl_bootstrap_id): MPI_Bcast of the id, then a barrier,
// then the blocking ncclCommInitRank. With collective offload (HCOLL in
// HPC-X) a broadcast may only complete on a LATER MPI call; without the
// barrier rank 0 could enter ncclCommInitRank (which waits for every rank)
// while another rank's MPI_Bcast has not progressed: a deadlock. The barrier
// is that later call, and returns only once every rank holds the id.
//
// Warm-up: right after ncclCommInitRank the constructor runs one small and
// one large all-reduce (and a reduce-scatter + all-gather), so that NCCL
// connects its channels and allocates its buffers now (recent NCCL connects
// lazily, at the first collective; NVLS buffers on NVSwitch systems): the
// free memory the trainer sizes its arena from is then measured after them.
//
// Errors: abort_collectives() (and abort_job) call ncclCommAbort, which does
// not wait; ncclCommDestroy waits for the communicator to be quiescent, so on
// an error path (another rank still inside a collective) it would block until
// walltime. The destructor also aborts instead of destroying when it runs
// during stack unwinding (std::uncaught_exceptions()).
//
// Streams. The compute stream is the one the cuda backend launches on: the
// legacy default stream (CudaBackend's stream_ is null). Every collective runs
// on the communicator's own stream after an event recorded on the compute
// stream (so it sees the gradients the backward just produced). Blocking
// collectives then synchronise the communication stream before returning;
// the *_start() calls return at once with a ticket; wait(t) and wait_all() make
// the compute stream wait for an event recorded after them (the host does not
// block): the backward of the layers below overlaps the all-reduce of the
// layers above (docs/distributed.md).
// The communication stream has the highest priority the device offers, so
// that its kernels are scheduled ahead of the backward's when both are ready.
// group_start()/group_end() bracket one layer's twelve all-reduces into one
// ncclGroupStart/End (one launch, one event shared by their tickets) instead
// of twelve.
// DType::BF16 is ncclBfloat16, ReduceOp::Avg is ncclAvg.
// agree(), barrier() and abort_job() go through the host communicator: flags
// live on the host.
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
