// The Communicator: collectives across the ranks of a data-parallel job, in
// three implementations: single (one process: copies or nothing), mpi (Open
// MPI on host buffers) and nccl (NCCL on device buffers, bootstrapped over
// MPI). Blocking collectives, asynchronous ones (start -> ticket -> wait),
// splits into sub-groups, and the launcher's rank and world size. The rules
// every implementation follows are below, above the class.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ratchet {

enum class DType { F32, F64, I32, I64, U8, BF16 };
enum class ReduceOp { Sum, Avg, Max, Min };

size_t dtype_bytes(DType t);
const char* dtype_name(DType t);

// Implementations:
//   single  one process, world size 1: every collective is a copy or nothing
//           (distributed/communicator.cpp; always built)
//   mpi     Open MPI on CPU (host) buffers (distributed/mpi_communicator.cpp; built
//           only when CMake finds MPI)
//   nccl    NCCL on device buffers, bootstrapped over MPI: rank 0 creates the
//           unique id and broadcasts it (distributed/nccl_communicator.cpp; built
//           only with the CUDA toolkit + NCCL + MPI)
//
// Buffers live in the memory space the communicator works on (host for
// single/mpi, device for nccl). Counts are in elements of `dtype`.
// DType::BF16 (bfloat16, 2 bytes) is for gradients and parameters in the
// backends' BF16 storage: MPI reduces it with a user-defined op that adds in
// FP32 and rounds to nearest even (every pairwise combination rounds once:
// for 2 ranks the result is RNE(a + b), exactly what NCCL gives); NCCL maps it
// to ncclBfloat16. Max/Min work on it too.
// Collectives (W = world(), all ranks must call them in the same order):
//   all_reduce(buf, n)                     buf (n) <- op over ranks of buf (n)   (in place)
//   reduce_scatter(send, recv, n)          send (W·n) -> recv (n): rank r gets
//                                          op over ranks of send[r·n, r·n+n)
//   all_gather(send, recv, n)              send (n) -> recv (W·n): recv[r·n..] = rank r's send
//   broadcast(buf, bytes, root)            root's bytes to every rank
//   barrier()
//   agree(flag)                            logical OR of flag over ranks: every
//                                          stop decision goes through it, so all
//                                          ranks stop at the same step
//   all_to_all(send, recv, n)              send (W·n) -> recv (W·n): block q of
//                                          send goes to rank q, block q of recv
//                                          came from rank q
//   all_to_allv(send, sc, recv, rc)        the same with W block sizes per side
//                                          (sc, rc: host arrays, elements), the
//                                          blocks packed in rank order; rc must
//                                          match what the ranks send (exchange
//                                          the counts first with all_to_all).
//                                          Expert parallelism's dispatch and
//                                          combine (distributed/expert_parallel.h)
// ReduceOp::Avg divides the sum by W after reducing.
//
// Asynchronous collectives, one spelling: start -> ticket -> wait.
//   t = all_reduce_start(buf, n)           in place, as all_reduce
//   t = reduce_scatter_start(send, recv, n) as reduce_scatter (send != recv)
//   t = all_gather_start(send, recv, n)    as all_gather (send may be this
//                                          rank's slot of recv: in place)
//   wait(t)                                completes that one (in-order
//                                          implementations may complete
//                                          earlier ones with it)
//   wait_all()                             completes every one started so far
//   progress()                             lets the implementation move them
//                                          along while the caller computes
// The buffers must not be touched until the ticket is waited for (or
// wait_all()). group_start()/group_end() bracket starts that may be fused into
// one launch (nccl: ncclGroupStart/End). The same order of calls on every
// rank, as for the blocking collectives; ReduceOp::Avg divides at the wait.
// mpi: MPI_Iallreduce/MPI_Ireduce_scatter_block/MPI_Iallgather, wait is
// MPI_Wait. nccl: on the communication stream after the compute stream's work
// so far; wait makes the compute stream wait for an event recorded after it
// (the host does not block). single (and the defaults): the blocking
// collective at the start, ticket 0, and nothing to wait for.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "single", "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual int local_rank() const = 0;   // rank among the ranks on this node
  virtual int local_world() const = 0;  // ranks on this node

  virtual void all_reduce(void* buf, size_t n, DType t, ReduceOp op) = 0;
  virtual void reduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp op) = 0;
  virtual void all_gather(const void* send, void* recv, size_t n, DType t) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  virtual bool agree(bool flag) = 0;
  // Defaults: an Error naming the communicator (a test double without them).
  virtual void all_to_all(const void* send, void* recv, size_t n, DType t);
  virtual void all_to_allv(const void* send, const size_t* send_counts, void* recv,
                           const size_t* recv_counts, DType t);

  // Asynchronous collectives (see the top of this file). Defaults: the
  // blocking collective, ticket 0, nothing to wait for.
  using Ticket = uint64_t;
  virtual Ticket all_reduce_start(void* buf, size_t n, DType t, ReduceOp op) {
    all_reduce(buf, n, t, op);
    return 0;
  }
  virtual Ticket reduce_scatter_start(const void* send, void* recv, size_t n, DType t,
                                      ReduceOp op) {
    reduce_scatter(send, recv, n, t, op);
    return 0;
  }
  virtual Ticket all_gather_start(const void* send, void* recv, size_t n, DType t) {
    all_gather(send, recv, n, t);
    return 0;
  }
  virtual void wait(Ticket) {}
  virtual void wait_all() {}
  virtual void progress() {}
  // Brackets starts that may be fused into one launch (nccl: ncclGroupStart/
  // End; mpi and single: nothing). Only *_start calls between them; the same
  // on every rank.
  virtual void group_start() {}
  virtual void group_end() {}

  // Error path only: ends this rank's in-flight collectives WITHOUT waiting for
  // the other ranks (nccl: ncclCommAbort); the communicator is unusable after.
  // Called before anything that could block (a destructor, abort_job): see
  // run_training (train/trainer.cpp). mpi and single: nothing to abort.
  virtual void abort_collectives() {}

  // An error the library found outside any call (nccl: ncclCommGetAsyncError
  // on this communicator and its splits: a peer or link failed while a
  // collective was in flight), as a message; "" when none (mpi and single:
  // errors surface in the calls). Thread-safe: the hang watchdog polls it
  // from its monitor thread while collectives run, and ends the job at once
  // instead of waiting out the hang timeout.
  virtual std::string async_error() { return ""; }

  // Ends the whole job now (every rank), exit code `code`: MPI_Abort for mpi.
  // For a failing rank, so that no other rank is left waiting in a collective.
  [[noreturn]] virtual void abort_job(int code) = 0;

  // Collective over this communicator: a new communicator of the ranks that
  // passed the same `color` (>= 0), ranked by `key` (ties by this rank). The
  // result works on the same memory space and must be destroyed before this
  // one. mpi: MPI_Comm_split; nccl: ncclCommSplit (with the host communicator
  // split alike for its scalars); single: another single. Default: an Error
  // naming the communicator (a test double that cannot split).
  virtual std::unique_ptr<Communicator> split(int color, int key);
  // Collective: the ranks sharing this rank's host, ranked by this rank.
  // mpi: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), as local_world() counts
  // them; single: another single. Default: an Error.
  virtual std::unique_ptr<Communicator> split_node();

  // Conveniences over the virtuals above.
  void broadcast_string(std::string* s, int root);
  double all_reduce_sum(double x);  // one double summed over ranks

  // Collective, on a HOST communicator (mpi, single): every rank's string, in
  // rank order, on every rank. Two all_gathers: the lengths, then the bytes
  // padded to the longest (none when every string is empty). Strings may
  // hold any bytes, '\0' included. For agreeing on per-rank results (errors,
  // checkpoint shard descriptions).
  std::vector<std::string> gather_strings(const std::string& mine);
};

// Rank, local rank and world size as the launcher set them, looked up in this
// order: OMPI_COMM_WORLD_{RANK,LOCAL_RANK,SIZE,LOCAL_SIZE} (mpirun), then PMIx
// (PMIX_RANK with SLURM_NTASKS/SLURM_LOCALID for the rest: srun --mpi=pmix),
// then SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS (plain srun; only inside a job
// step: a batch shell sees SLURM_PROCID=0 and SLURM_NTASKS=N but is one
// process). The world size prefers SLURM_STEP_NUM_TASKS (srun -n 1 inside an
// N-task job is one rank). Nothing set: rank 0 of 1. `source` names where the values came from, for the log.
struct LaunchInfo {
  int rank = 0;
  int local_rank = 0;
  int world = 1;
  int local_world = 1;
  std::string source = "none";
};
LaunchInfo detect_launch();
// The same from an explicit environment lookup (for tests).
LaunchInfo detect_launch_from(const char* (*getenv_fn)(const char*));
// Parses Slurm's tasks-per-node lists ("2", "2(x3),1") and returns the count
// for node `node` (0-based); -1 when unparsable.
int slurm_tasks_on_node(const std::string& list, int node);

// The single-process communicator (world size 1).
std::unique_ptr<Communicator> make_single_communicator();
// Picks the communicator for this process: MPI when the launcher says the
// world has more than one rank (an Error when this build has no MPI), else
// single. Sets the log rank (core/error.h) so RLOG prints on rank 0 only.
std::unique_ptr<Communicator> make_communicator();
// True when this build includes the MPI communicator.
bool have_mpi();

// The communicator for DEVICE buffers (NCCL), bootstrapped over `host`. It
// lives in the ratchet_nccl library, which the trainer library does not link:
// an executable linked with it registers it (src/cli/main.cpp,
// RATCHET_REGISTER_NCCL). select_device(local_rank) makes the local rank's GPU
// current (before the backend allocates on it); it does nothing when no device
// is usable (the backend then says what to do).
// select_device gets the ranks on this node too: more ranks than visible
// devices is an Error (two ranks on one GPU), see device_for_local_rank.
// host_buffers marks a stand-in that works on host memory (tests, e.g. the
// stub NCCL of tests/mpi/stub_device_comm_main.cpp): then the simt backend
// uses it too.
struct DeviceCommunicatorMaker {
  std::unique_ptr<Communicator> (*make)(Communicator& host) = nullptr;
  void (*select_device)(int local_rank, int local_world) = nullptr;
  bool host_buffers = false;
};
void register_device_communicator(const DeviceCommunicatorMaker& m);
bool have_device_communicator();
// Whether gradients of a backend named `backend_name` ("cuda (bf16)", "simt
// (f32)", "cpu") go through the device communicator rather than the host one.
bool wants_device_communicator(const std::string& backend_name);
// The device of a local rank: local_rank itself. One GPU per rank: fails
// (Error, naming the counts and what to do) when the node runs more ranks than
// it has visible devices (local_world > devices) rather than silently putting
// two ranks on one GPU; and when there is no device at all.
int device_for_local_rank(int local_rank, int local_world, int devices);
// Error (with what to do) when no device communicator is registered.
std::unique_ptr<Communicator> make_device_communicator(Communicator& host);
// Makes the local rank's device current if a device communicator is registered.
void select_device_for_local_rank(int local_rank, int local_world);

}  // namespace ratchet
