// See shard_collectives.h.
#include "distributed/shard_collectives.h"

#include <cmath>

#include "core/error.h"
#include "core/fault.h"
#include "distributed/expert_shards.h"
#include "distributed/shard_groups.h"

namespace ratchet {

ShardComms ShardComms::of(const DistributedConfig& c) {
  RATCHET_ASSERT(c.host != nullptr);
  const ShardGroups* g = c.groups;
  ShardComms s;
  s.host = c.host;
  s.world = c.device ? c.device : c.host;
  s.shard_host = g ? g->intra.get() : c.host;
  s.shard = !g ? s.world : c.device ? g->intra_dev.get() : g->intra.get();
  s.replicas = !g ? nullptr : c.device ? g->inter_dev.get() : g->inter.get();
  s.count = c.shards();
  s.index = c.shard_index();
  s.writer = !g || g->index == 0;
  RATCHET_ASSERT(s.world->world() == s.host->world() && s.world->rank() == s.host->rank());
  RATCHET_ASSERT(s.shard_host && s.shard && (!g || s.replicas));
  RATCHET_ASSERT(!g || g->size * g->count == s.host->world());
  return s;
}

ShardComms ShardComms::experts_of(const DistributedConfig& c) {
  RATCHET_ASSERT(c.host && c.experts && c.experts->replicas);
  ShardComms s;
  s.host = c.host;
  s.world = c.device ? c.device : c.host;
  s.shard_host = c.host;  // unused: the strategies' norm runs over the world
  s.shard = c.experts->replicas;
  s.count = c.experts->replicas->world();
  s.index = c.experts->replicas->rank();
  RATCHET_ASSERT(s.index == c.experts->group);
  return s;
}

DType ShardCollectives::dtype() const {
  return be_.storage_bytes() == 2 ? DType::BF16 : DType::F32;
}

// Hybrid sharding: the group's reduce-scatter (a copy for groups of one),
// then the shard's all-reduce across the groups (docs/distributed.md's
// reduction order).
void ShardCollectives::reduce_scatter(const void* send, void* recv, size_t n) {
  fault_point("zero-reduce-scatter");  // scripts/chaos.sh: one rank dies as the others enter it
  if (c_.count == 1) {
    if (send != recv) be_.copy(recv, send, n * be_.storage_bytes());
  } else {
    c_.shard->reduce_scatter(send, recv, n, dtype(), ReduceOp::Sum);
  }
  if (hybrid()) c_.replicas->all_reduce(recv, n, dtype(), ReduceOp::Sum);
}

Communicator::Ticket ShardCollectives::reduce_scatter_start(const void* send, void* recv, size_t n) {
  fault_point("zero-reduce-scatter");
  if (c_.count == 1) {
    if (send != recv) be_.copy(recv, send, n * be_.storage_bytes());
    return 0;
  }
  return c_.shard->reduce_scatter_start(send, recv, n, dtype(), ReduceOp::Sum);
}

void ShardCollectives::wait_shard(Communicator::Ticket t) {
  if (c_.count > 1) c_.shard->wait(t);
}

Communicator::Ticket ShardCollectives::replicas_all_reduce_start(void* buf, size_t n) {
  return c_.replicas->all_reduce_start(buf, n, dtype(), ReduceOp::Sum);
}

void ShardCollectives::all_gather(const void* send, void* recv, size_t n) {
  fault_point("zero-all-gather");  // scripts/chaos.sh: one rank dies as the others enter it
  if (c_.count == 1) {
    if (send != recv) be_.copy(recv, send, n * be_.storage_bytes());
    return;
  }
  c_.shard->all_gather(send, recv, n, dtype());
}

double ShardCollectives::norm(double sum_squares) const {
  return std::sqrt(c_.shard_host->all_reduce_sum(sum_squares));
}

}  // namespace ratchet
