// Equal forward counts for collective (ZeRO-3) forwards (distributed/forward_balance.h).
#include "distributed/forward_balance.h"

#include <algorithm>
#include <vector>

namespace ratchet {

long forward_passes_to_make(const GPT& model, Communicator& comm, long mine) {
  if (!model.collective_forward() || comm.world() == 1) return mine;
  double most = (double)mine;  // exact: counts are far below 2^53
  comm.all_reduce(&most, 1, DType::F64, ReduceOp::Max);
  return (long)most;
}

void idle_forwards(GPT& model, long n) {
  // A multiple of 8 where the model allows (the cuda backend's attention).
  const int T = std::min(8, model.config().max_seq_len);
  std::vector<int32_t> tokens((size_t)T, 0);
  for (long i = 0; i < n; i++) model.forward(tokens.data(), nullptr, 1, T);
}

void balanced_forwards(GPT& model, Communicator& comm, long mine,
                       const std::function<void(long)>& forward) {
  const long passes = forward_passes_to_make(model, comm, mine);
  for (long k = 0; k < mine; k++) forward(k);
  idle_forwards(model, passes - mine);
}

void strided_forwards(GPT& model, Communicator& comm, long n,
                      const std::function<void(long)>& forward,
                      const std::function<void(long)>& skip) {
  const int W = comm.world(), r = comm.rank();
  const long mine = strided_count(n, W, r);
  const long passes = forward_passes_to_make(model, comm, mine);
  for (long i = 0; i < n; i++) {
    if (i % W == r)
      forward(i);
    else if (skip)
      skip(i);
  }
  idle_forwards(model, passes - mine);
}

bool run_on_rank0(GPT& model, Communicator& comm, const std::function<void()>& work) {
  if (comm.rank() != 0 && !model.collective_forward()) return false;
  work();
  return true;
}

}  // namespace ratchet
