// Hybrid sharding (--shard-group N|node): ZeRO-k inside groups of N ranks,
// the groups replicas of one another (HSDP in FSDP2's words). The groups'
// communicators (a strategy composes them: shard_collectives.h), the flag's
// parsing, and the summation order a checkpoint records. How the groups are
// formed is above ShardGroups; docs/distributed.md has the reduction order.
#pragma once
#include <memory>
#include <string>

#include "distributed/communicator.h"

namespace ratchet {

// The W ranks of the world form W/N groups of N. A group holds one copy of the
// sharded state: its N ranks own the N shards (distributed/strategy.h's shard_range over
// N). Two communicators per rank, split from the world (Communicator::split):
//   intra  the N ranks of this rank's group, ranked by world rank: the
//          reduce-scatter of the gradient and the all-gather of the parameters
//   inter  the W/N ranks that own the same shard (the same index in their
//          group), one per group, ranked by world rank: the all-reduce of the
//          summed shard across groups
// so the traffic between groups (between nodes, for `node`) is the all-reduce
// of 1/N of the gradient.
//
// Which ranks form a group:
//   N      ranks [g·N, g·N + N) are group g (mpirun and srun place consecutive
//          ranks on one node, so a group of N <= ranks per node stays on one)
//   node   the ranks sharing a host (Communicator::split_node: MPI's
//          MPI_COMM_TYPE_SHARED); every node must run the same number of ranks.
//          Where MPI believes every rank is on one host (mpirun on one
//          machine), the group is the world: plain ZeRO-k.
// N = W is plain ZeRO-k (one group); N = 1 is ZeRO-0 (nothing sharded: every
// rank keeps all of the optimizer state and the gradient is all-reduced over
// the world by the inter communicator).
//
// When the gradients go through a device communicator (NCCL, or the simt
// stand-in), it is split the same way: intra_dev and inter_dev.
struct ShardGroups {
  std::string spec;    // the flag's value: "node" or a number
  int size = 1;        // N: ranks per group = shards per copy of the state
  int count = 1;       // W / N: groups (replicas)
  int index = 0;       // this rank's group
  int member = 0;      // this rank's index in its group = the shard it owns
  std::unique_ptr<Communicator> intra, inter;          // host memory (MPI, single)
  std::unique_ptr<Communicator> intra_dev, inter_dev;  // device memory, when there is one
  // For the log: "4 ranks in 2 group(s) of 2: ...".
  std::string describe() const;
};

// Parses and checks --shard-group against the world size without any
// collective: N a whole number from 1 to W that divides W, or "node". Returns
// N (0 for "node"). An Error naming the flag and the value otherwise.
int parse_shard_group(const std::string& spec, int world);

// How a step's gradient is summed, as a checkpoint records it (setting
// "gradient_sum"): two runs whose texts are equal add the same numbers in the
// same order. `accum` micro-batches per rank are accumulated by the backward,
// then the ranks' gradients are added by one level (stage 0: the all-reduce;
// stage 1: the reduce-scatter) or two (--shard-group N < W at stage 1: in the
// group, then across the groups). A level of 1 adds nothing and a level of 2
// adds once (a + b, the same in every collective), so e.g. W = 2 at stage 0,
// stage 1 and --shard-group 1 or 2 all read "2 ranks (a+b)"; a level of more
// ranks is named with its collective (MPI and NCCL pick their own order, by
// message size too: `per_layer` is stage 0's overlapped all-reduce of each
// layer's slices).
std::string gradient_sum_order(int world, int accum, int stage, int group_size, bool per_layer);

// The same summation as an expression, for comparing two runs' orders: the
// leaves g<k> are the step's micro-batch gradients in the loader's order
// (micro-step m of rank r is k = m·W + r, data/mixture.h), "(x+y)" one
// addition, "acc(...)" micro-batches accumulated by the backward itself (not a
// sum of separate gradients), "<collective>[n](...)" a collective's own order
// over n > 2 values. Two runs whose expressions are equal compute the same
// bits even where gradient_sum_order's texts differ: two ranks with one
// micro-batch each and one rank at stage 2 with two micro-batches both add
// (g0+g1) (stage 2 sums each micro-batch separately, then adds the sums).
std::string gradient_sum_tree(int world, int accum, int stage, int group_size, bool per_layer);

// Collective over `world` (and `device`, when given: the communicator the
// gradients go through, with the same ranks). Builds the groups of `spec`
// ("node" or N, see parse_shard_group); "node" fails (Error, the same on every
// rank) unless every node runs the same number of ranks.
std::unique_ptr<ShardGroups> make_shard_groups(Communicator& world, Communicator* device,
                                               const std::string& spec);

}  // namespace ratchet
