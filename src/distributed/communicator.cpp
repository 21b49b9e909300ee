#include "distributed/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#ifdef RATCHET_HAVE_MPI
#include "distributed/mpi_communicator.h"
#endif

namespace ratchet {

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::BF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::BF16: return "bf16";
  }
  return "?";
}

void Communicator::broadcast_string(std::string* s, int root) {
  uint64_t n = s->size();
  broadcast(&n, sizeof n, root);
  s->resize(n);
  if (n) broadcast(s->data(), n, root);
}

double Communicator::all_reduce_sum(double x) {
  all_reduce(&x, 1, DType::F64, ReduceOp::Sum);
  return x;
}

std::vector<std::string> Communicator::gather_strings(const std::string& mine) {
  const int W = world();
  int64_t n = (int64_t)mine.size();
  std::vector<int64_t> lens(W);
  all_gather(&n, lens.data(), 1, DType::I64);
  int64_t longest = 0;
  for (int64_t l : lens) longest = std::max(longest, l);
  std::vector<std::string> out(W);
  if (longest == 0) return out;
  std::vector<char> send(longest, 0), all((size_t)longest * W);
  std::copy(mine.begin(), mine.end(), send.begin());
  all_gather(send.data(), all.data(), (size_t)longest, DType::U8);
  for (int r = 0; r < W; r++) out[r].assign(all.data() + (size_t)r * longest, lens[r]);
  return out;
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  fail("the ", name(), " communicator cannot be split (color ", color, ", key ", key,
       "): --shard-group needs the mpi or nccl communicator");
}

std::unique_ptr<Communicator> Communicator::split_node() {
  fail("the ", name(), " communicator cannot be split by node: --shard-group node needs MPI");
}

void Communicator::all_to_all(const void*, void*, size_t n, DType t) {
  fail("the ", name(), " communicator has no all_to_all (", n, " ", dtype_name(t),
       " per rank): --expert-parallel needs the mpi communicator");
}

void Communicator::all_to_allv(const void*, const size_t*, void*, const size_t*, DType t) {
  fail("the ", name(), " communicator has no all_to_allv (", dtype_name(t),
       "): --expert-parallel needs the mpi communicator");
}

// ---- launcher variables -------------------------------------------------------

int slurm_tasks_on_node(const std::string& list, int node) {
  // "2(x3),1": 2 tasks on each of 3 nodes, then 1.
  size_t i = 0;
  int seen = 0;
  while (i < list.size()) {
    size_t j = i;
    while (j < list.size() && isdigit((unsigned char)list[j])) j++;
    if (j == i) return -1;
    const int tasks = std::atoi(list.substr(i, j - i).c_str());
    int reps = 1;
    if (j < list.size() && list[j] == '(') {
      if (j + 2 >= list.size() || list[j + 1] != 'x') return -1;
      size_t k = j + 2;
      while (k < list.size() && isdigit((unsigned char)list[k])) k++;
      if (k >= list.size() || list[k] != ')') return -1;
      reps = std::atoi(list.substr(j + 2, k - j - 2).c_str());
      j = k + 1;
    }
    if (node < seen + reps) return tasks;
    seen += reps;
    if (j < list.size() && list[j] != ',') return -1;
    i = j + 1;
  }
  return -1;
}

LaunchInfo detect_launch_from(const char* (*env)(const char*)) {
  auto num = [&](const char* name, int* out) {
    const char* v = env(name);
    if (!v || !*v) return false;
    char* end = nullptr;
    long x = std::strtol(v, &end, 10);
    if (*end) return false;
    *out = (int)x;
    return true;
  };
  LaunchInfo li;
  auto slurm_local_world = [&]() {
    int node = 0;
    num("SLURM_NODEID", &node);
    for (const char* var : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      const char* v = env(var);
      if (v && *v) {
        const int n = slurm_tasks_on_node(v, node);
        if (n > 0) return n;
      }
    }
    return li.world;
  };
  if (num("OMPI_COMM_WORLD_RANK", &li.rank)) {
    li.source = "mpirun (OMPI_COMM_WORLD_*)";
    num("OMPI_COMM_WORLD_SIZE", &li.world);
    if (!num("OMPI_COMM_WORLD_LOCAL_RANK", &li.local_rank)) li.local_rank = li.rank;
    if (!num("OMPI_COMM_WORLD_LOCAL_SIZE", &li.local_world)) li.local_world = li.world;
  } else if (num("PMIX_RANK", &li.rank)) {
    li.source = "PMIx (PMIX_RANK)";
    if (!num("SLURM_STEP_NUM_TASKS", &li.world) && !num("SLURM_NTASKS", &li.world) &&
        !num("PMIX_SIZE", &li.world))
      li.world = li.rank + 1;
    if (!num("SLURM_LOCALID", &li.local_rank)) li.local_rank = li.rank;
    li.local_world = slurm_local_world();
  } else if (num("SLURM_PROCID", &li.rank)) {
    // Only a job step (srun) is a set of ranks: the batch shell of a job with
    // --ntasks=N also sees SLURM_PROCID=0 and SLURM_NTASKS=N, but runs alone.
    int step = 0;
    if (num("SLURM_STEP_ID", &step) || num("SLURM_STEPID", &step)) {
      li.source = "Slurm (SLURM_PROCID)";
      if (!num("SLURM_STEP_NUM_TASKS", &li.world) && !num("SLURM_NTASKS", &li.world))
        li.world = 1;
      if (!num("SLURM_LOCALID", &li.local_rank)) li.local_rank = 0;
      li.local_world = slurm_local_world();
    } else {
      li = LaunchInfo{};
      li.source = "Slurm batch shell (not a job step: one process)";
    }
  }
  if (li.world < 1 || li.rank < 0 || li.rank >= li.world)
    fail("launcher variables are inconsistent (", li.source, "): rank ", li.rank, " of world ",
         li.world, ". Launch with mpirun or srun, or unset the rank variables");
  if (li.local_world < 1) li.local_world = 1;
  if (li.local_rank < 0 || li.local_rank >= li.local_world) li.local_rank = 0;
  return li;
}

LaunchInfo detect_launch() {
  return detect_launch_from([](const char* n) -> const char* { return std::getenv(n); });
}

// ---- the single-process communicator ------------------------------------------

namespace {

class SingleCommunicator final : public Communicator {
 public:
  std::string name() const override { return "single"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  void all_reduce(void*, size_t, DType, ReduceOp) override {}
  void reduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp) override {
    if (send != recv) std::memmove(recv, send, n * dtype_bytes(t));
  }
  void all_gather(const void* send, void* recv, size_t n, DType t) override {
    if (send != recv) std::memmove(recv, send, n * dtype_bytes(t));
  }
  void broadcast(void*, size_t, int root) override { RATCHET_ASSERT(root == 0); }
  void barrier() override {}
  bool agree(bool flag) override { return flag; }
  // One rank: its own block, copied.
  void all_to_all(const void* send, void* recv, size_t n, DType t) override {
    if (send != recv) std::memmove(recv, send, n * dtype_bytes(t));
  }
  void all_to_allv(const void* send, const size_t* sc, void* recv, const size_t* rc,
                   DType t) override {
    if (sc[0] != rc[0])
      fail("all_to_allv on one rank: sends ", sc[0], " elements but expects ", rc[0]);
    if (send != recv && sc[0] > 0) std::memmove(recv, send, sc[0] * dtype_bytes(t));
  }
  [[noreturn]] void abort_job(int code) override { std::exit(code); }
  std::unique_ptr<Communicator> split(int color, int) override {
    RATCHET_ASSERT(color >= 0);
    return std::make_unique<SingleCommunicator>();
  }
  std::unique_ptr<Communicator> split_node() override {
    return std::make_unique<SingleCommunicator>();
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

bool have_mpi() {
#ifdef RATCHET_HAVE_MPI
  return true;
#else
  return false;
#endif
}

namespace {
DeviceCommunicatorMaker& device_maker() {
  static DeviceCommunicatorMaker m;
  return m;
}
}  // namespace

void register_device_communicator(const DeviceCommunicatorMaker& m) { device_maker() = m; }

bool have_device_communicator() { return device_maker().make != nullptr; }

std::unique_ptr<Communicator> make_device_communicator(Communicator& host) {
  if (!have_device_communicator())
    fail("the cuda backend on ", host.world(),
         " ranks averages gradients in device memory with NCCL, but this ratchet was built "
         "without the NCCL communicator: install NCCL (it ships with the CUDA toolkit, or "
         "libnccl-dev) and an MPI (libopenmpi-dev), then reconfigure and rebuild (cmake finds "
         "nccl.h and libnccl next to CUDA: cmake/nccl.cmake); or run a single rank");
  return device_maker().make(host);
}

bool wants_device_communicator(const std::string& backend_name) {
  if (backend_name.rfind("cuda", 0) == 0) return true;
  return backend_name.rfind("simt", 0) == 0 && device_maker().make && device_maker().host_buffers;
}

int device_for_local_rank(int local_rank, int local_world, int devices) {
  if (devices < 1)
    fail("no usable CUDA device for local rank ", local_rank,
         ": the cuda backend on several ranks needs one GPU per rank");
  if (local_world > devices)
    fail(local_world, " ranks on this node but only ", devices,
         " visible GPU(s): ratchet runs one rank per GPU (two ranks sharing a GPU would "
         "each size its memory as if alone and fail or crawl). Launch at most ", devices,
         " ranks per node (srun --ntasks-per-node=", devices, " --gpus-per-task=1, or mpirun "
         "-npernode ", devices, "), or check CUDA_VISIBLE_DEVICES");
  if (local_rank < 0 || local_rank >= local_world)
    fail("local rank ", local_rank, " is outside the ", local_world,
         " ranks on this node: the launcher variables disagree (distributed/communicator.h)");
  return local_rank;
}

void select_device_for_local_rank(int local_rank, int local_world) {
  if (device_maker().select_device) device_maker().select_device(local_rank, local_world);
}

std::unique_ptr<Communicator> make_communicator() {
  const LaunchInfo li = detect_launch();
  std::unique_ptr<Communicator> c;
  if (li.world > 1) {
#ifdef RATCHET_HAVE_MPI
    c = make_mpi_communicator(li);
#else
    set_log_rank(li.rank, li.world);
    fail("launched as rank ", li.rank, " of ", li.world, " (", li.source,
         ") but this ratchet was built without MPI: install an MPI (libopenmpi-dev) and "
         "rebuild, or run one process");
#endif
  } else {
    c = make_single_communicator();
  }
  set_log_rank(c->rank(), c->world());
  return c;
}

}  // namespace ratchet
