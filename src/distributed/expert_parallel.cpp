// Expert parallelism's groups and exchange (expert_parallel.h).
#include "distributed/expert_parallel.h"

#include <chrono>
#include <sstream>

#include "core/error.h"
#include "model/config.h"
#include "model/gpt.h"

namespace ratchet {

void check_expert_parallel(int n, int world, const GPTConfig& cfg, const std::string& backend) {
  if (n < 1) fail("--expert-parallel ", n, " must be at least 1 (1: no expert parallelism)");
  if (n == 1) return;
  if (world % n != 0)
    fail("--expert-parallel ", n, " must divide the world size ", world,
         ": the ranks form groups of ", n, " (launch a multiple of ", n, " ranks)");
  if (!cfg.moe())
    fail("--expert-parallel ", n, " needs a Mixture-of-Experts model (this model has no experts)");
  if (cfg.num_experts % n != 0)
    fail("--expert-parallel ", n, " must divide num_experts ", cfg.num_experts,
         ": each rank holds the same number of experts (choose a divisor of ", cfg.num_experts,
         ")");
  const bool device = backend.rfind("cuda", 0) == 0 || backend.rfind("simt", 0) == 0;
  if (backend != "cpu" && !device)
    fail("--expert-parallel runs on the cpu and cuda backends (docs/moe.md); this run's backend "
         "is ", backend, ": use --device cpu or --expert-parallel 1");
}

ExpertParallel::ExpertParallel(Communicator& world, int n, Communicator* device)
    : n_(n), groups_(world.world() / n) {
  RATCHET_ASSERT(n >= 1 && world.world() % n == 0);
  // Consecutive ranks (mpirun and srun place them on one node).
  group_ = world.split(world.rank() / n, world.rank());
  replicas_ = world.split(world.rank() % n, world.rank());
  shards_.group = world.rank() / n;
  RATCHET_ASSERT(group_->world() == n);
  if (device) {  // the same groups on device buffers (every rank splits alike)
    RATCHET_ASSERT(device->world() == world.world() && device->rank() == world.rank());
    dgroup_ = device->split(world.rank() / n, world.rank());
    dreplicas_ = device->split(world.rank() % n, world.rank());
  }
}

const ExpertShards& ExpertParallel::shards(const GPTConfig& cfg) {
  shards_.n = n_;
  shards_.index = rank();
  shards_.all = expert_ranges(cfg, n_, -1);
  shards_.own = expert_ranges(cfg, n_, rank());
  shards_.group_host = group_.get();
  shards_.replicas = dreplicas_ ? dreplicas_.get() : replicas_.get();
  shards_.cfg = &cfg;
  return shards_;
}

void ExpertParallel::apply(GPT& model) { model.set_moe_exchange(this); }

std::string ExpertParallel::describe(int num_experts) const {
  std::ostringstream os;
  const int per = num_experts / n_;
  os << "expert parallel: " << groups_ << " group(s) of " << n_ << " ranks; this rank holds experts "
     << rank() * per << ".." << (rank() + 1) * per - 1 << " of " << num_experts;
  return os.str();
}

namespace {
double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ExpertParallel::Traffic ExpertParallel::take_traffic() {
  const Traffic t = traffic_;
  traffic_ = Traffic();
  return t;
}

void ExpertParallel::counts(const int* send, int* recv, int n) {
  const double t0 = seconds_now();
  group_->all_to_all(send, recv, (size_t)n, DType::I32);
  traffic_.seconds += seconds_now() - t0;
  traffic_.bytes += (double)(n_ - 1) * n * sizeof(int);
}

void ExpertParallel::rows(const float* send, const size_t* send_counts, float* recv,
                          const size_t* recv_counts) {
  const double t0 = seconds_now();
  group_->all_to_allv(send, send_counts, recv, recv_counts, DType::F32);
  traffic_.seconds += seconds_now() - t0;
  for (int q = 0; q < n_; q++)
    if (q != rank()) traffic_.bytes += (double)send_counts[q] * sizeof(float);
}

void ExpertParallel::device_rows(const void* send, const size_t* send_counts, void* recv,
                                 const size_t* recv_counts, int elem_bytes) {
  RATCHET_ASSERT(elem_bytes == 4 || elem_bytes == 2);
  const double t0 = seconds_now();
  Communicator& c = dgroup_ ? *dgroup_ : *group_;
  c.all_to_allv(send, send_counts, recv, recv_counts, elem_bytes == 2 ? DType::BF16 : DType::F32);
  traffic_.seconds += seconds_now() - t0;
  for (int q = 0; q < n_; q++)
    if (q != rank()) traffic_.bytes += (double)send_counts[q] * elem_bytes;
}

std::unique_ptr<ExpertParallel> make_expert_parallel(Communicator& world, int n,
                                                     Communicator* device) {
  if (n <= 1) return nullptr;
  return std::make_unique<ExpertParallel>(world, n, device);
}

}  // namespace ratchet
