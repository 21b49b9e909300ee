// See shard_groups.h.
#include "distributed/shard_groups.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"

namespace ratchet {

int parse_shard_group(const std::string& spec, int world) {
  if (spec == "node") return 0;
  char* end = nullptr;
  errno = 0;
  const long n = spec.empty() ? 0 : std::strtol(spec.c_str(), &end, 10);
  if (spec.empty() || *end || n < 1 || errno == ERANGE || !std::isdigit((unsigned char)spec[0]))
    fail("--shard-group '", spec, "' must be a number of ranks (at least 1) or 'node'");
  if (n > world || world % n != 0)
    fail("--shard-group ", n, " must divide the number of ranks, ", world,
         " (ZeRO-k runs inside groups of N ranks; N = ", world,
         " is plain ZeRO-k, 1 is ZeRO-0): pick a divisor of ", world, " or 'node'");
  return (int)n;
}

std::string ShardGroups::describe() const {
  const int W = size * count;
  std::string s = std::to_string(W) + " rank(s) in " + std::to_string(count) + " group(s) of " +
                  std::to_string(size) + " (--shard-group " + spec + "): ";
  if (count == 1)
    s += "one group, plain ZeRO-k";
  else if (size == 1)
    s += "groups of one rank, ZeRO-0: nothing sharded, gradients all-reduced over the world";
  else
    s += "shards reduce-scattered in each group, then all-reduced across the groups";
  return s;
}

std::string gradient_sum_order(int world, int accum, int stage, int group_size, bool per_layer) {
  if (stage == 0 || group_size < 1) group_size = world;
  // ZeRO-2 and 3 (distributed/sharded_gradients.h) sum every micro-batch over the ranks first and
  // add the micro-batches' sums after: another order once there are several.
  const bool per_micro = stage >= 2 && accum > 1;
  std::string s = accum > 1 && !per_micro ? std::to_string(accum) + " micro-batches accumulated per rank" : "";
  // The first level that adds is over ranks, a second one over groups.
  int levels = 0;
  auto level = [&](int n, const char* collective) {
    if (n <= 1) return;
    s += s.empty() ? "" : ", then ";
    s += std::to_string(n) + (levels++ ? " groups" : " ranks") +
         (n == 2 ? std::string(" (a+b)") : std::string(" (") + collective + "'s order)");
  };
  level(group_size, stage == 0 ? (per_layer ? "per-layer all-reduce" : "all-reduce")
                     : stage >= 2 || per_layer ? "per-bucket reduce-scatter"  // overlapped ZeRO-1 too
                                               : "reduce-scatter");
  level(world / group_size, "all-reduce");
  if (per_micro)
    s += (s.empty() ? "" : " ") + std::string("for each micro-batch, then the ") +
         std::to_string(accum) + " micro-batch sums added in order";
  return s.empty() ? "one rank, one micro-batch" : s;
}

std::string gradient_sum_tree(int world, int accum, int stage, int group_size, bool per_layer) {
  if (stage == 0 || group_size < 1) group_size = world;
  const int W = world, A = accum, N = group_size, G = world / group_size;
  // Stages 2 and 3 (the same gradient path: distributed/grad_buckets.h) sum each micro-batch
  // over the ranks, then add the sums.
  const bool per_micro = stage >= 2 && A > 1;
  auto leaf = [&](int m, int r) { return "g" + std::to_string(m * W + r); };
  // One level of sums over xs: nothing for one value, one addition for two,
  // the collective's order for more.
  auto combine = [](const std::vector<std::string>& xs, const std::string& collective) {
    if (xs.size() == 1) return xs[0];
    if (xs.size() == 2) return "(" + xs[0] + "+" + xs[1] + ")";
    std::string s = collective + "[" + std::to_string(xs.size()) + "](";
    for (size_t i = 0; i < xs.size(); i++) s += (i ? "," : "") + xs[i];
    return s + ")";
  };
  const std::string intra = stage == 0 ? (per_layer ? "per-layer-all-reduce" : "all-reduce")
                            : stage >= 2 || per_layer ? "per-bucket-reduce-scatter"
                                                      : "reduce-scatter";
  // The ranks' values summed in their group (ranks g·N .. g·N+N-1), then the
  // groups' sums across the groups.
  auto over_ranks = [&](const std::vector<std::string>& rank_values) {
    std::vector<std::string> groups;
    for (int g = 0; g < G; g++)
      groups.push_back(combine(std::vector<std::string>(rank_values.begin() + (long)g * N,
                                                        rank_values.begin() + (long)(g + 1) * N),
                               intra));
    return combine(groups, "all-reduce");
  };
  if (per_micro) {
    // Each micro-batch summed over the ranks, the sums added in order.
    std::string total;
    for (int m = 0; m < A; m++) {
      std::vector<std::string> xs;
      for (int r = 0; r < W; r++) xs.push_back(leaf(m, r));
      const std::string s = over_ranks(xs);
      total = m == 0 ? s : "(" + total + "+" + s + ")";
    }
    return total;
  }
  // Each rank's micro-batches accumulated by its backward, then the ranks summed.
  std::vector<std::string> xs;
  for (int r = 0; r < W; r++) {
    if (A == 1) {
      xs.push_back(leaf(0, r));
      continue;
    }
    std::string acc = "acc(";
    for (int m = 0; m < A; m++) acc += (m ? "," : "") + leaf(m, r);
    xs.push_back(acc + ")");
  }
  return over_ranks(xs);
}

std::unique_ptr<ShardGroups> make_shard_groups(Communicator& world, Communicator* device,
                                               const std::string& spec) {
  const int W = world.world(), r = world.rank();
  if (device) RATCHET_ASSERT(device->world() == W && device->rank() == r);
  auto g = std::make_unique<ShardGroups>();
  g->spec = spec;
  int N = parse_shard_group(spec, W);
  int color = 0, member = 0;
  if (N == 0) {
    // The ranks on this host, by MPI's shared-memory view. The group's color
    // is the world rank of its first member; every node must hold as many.
    std::unique_ptr<Communicator> node = world.split_node();
    N = node->world();
    int32_t lo = N, hi = N;
    world.all_reduce(&lo, 1, DType::I32, ReduceOp::Min);
    world.all_reduce(&hi, 1, DType::I32, ReduceOp::Max);
    if (lo != hi)
      fail("--shard-group node needs the same number of ranks on every node, but nodes run "
           "from ", lo, " to ", hi, " ranks: launch as many on each (srun --ntasks-per-node, "
           "mpirun -npernode) or give --shard-group a number");
    int32_t first = r;
    node->broadcast(&first, sizeof first, 0);
    color = first;
    member = node->rank();
  } else {
    color = r / N;
    member = r % N;
  }
  g->size = N;
  g->count = W / N;
  // Both splits are collective over the whole world, in this order on every rank.
  g->intra = world.split(color, r);
  g->inter = world.split(member, r);
  if (device) {
    g->intra_dev = device->split(color, r);
    g->inter_dev = device->split(member, r);
  }
  RATCHET_ASSERT(g->intra->world() == N && g->intra->rank() == member);
  RATCHET_ASSERT(g->inter->world() == W / N);
  g->member = member;
  g->index = g->inter->rank();
  return g;
}

}  // namespace ratchet
