// The Communicator: collectives across the ranks of a data-parallel job.
//
// Three implementations behind one interface:
//   single  one process, world size 1: every collective is a copy or nothing
//           (dist/communicator.cpp; always built)
//   mpi     Open MPI on CPU (host) buffers (dist/mpi_communicator.cpp; built
//           only when CMake finds MPI)
//   nccl    NCCL on device buffers, bootstrapped over MPI: rank 0 creates the
//           unique id and broadcasts it (dist/nccl_communicator.cpp; built
//           only with the CUDA toolkit + NCCL + MPI)
//
// Buffers live in the memory space the communicator works on (host for
// single/mpi, device for nccl). Counts are in elements of `dtype`.
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
// ReduceOp::Avg divides the sum by W after reducing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ratchet {

enum class DType { F32, F64, I32, I64, U8 };
enum class ReduceOp { Sum, Avg, Max, Min };

size_t dtype_bytes(DType t);
const char* dtype_name(DType t);

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

  // Ends the whole job now (every rank), exit code `code`: MPI_Abort for mpi.
  // For a failing rank, so that no other rank is left waiting in a collective.
  [[noreturn]] virtual void abort_job(int code) = 0;

  // Conveniences over the virtuals above.
  void broadcast_string(std::string* s, int root);
  double all_reduce_sum(double x);  // one double summed over ranks
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

}  // namespace ratchet
