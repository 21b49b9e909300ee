// The communicators a strategy is given, and the collectives on a shard of the
// state that stages 1-3 run through them. Hybrid sharding (--shard-group,
// shard_groups.h) is this composition: the reduce-scatter and all-gather run
// inside the shard group, and the summed shard is all-reduced across the
// groups (the replicas); without groups the shard group is the world and
// there are no replicas. One rank per shard group: the collectives are
// Backend::copy calls (the single-process communicator works on host memory
// only, and the backend's may be device memory).
#pragma once
#include <cstddef>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"

namespace ratchet {

struct ShardComms {
  Communicator* host = nullptr;        // the world, host memory: scalars
  Communicator* world = nullptr;       // the world, backend memory: stage 0's all-reduce
  Communicator* shard_host = nullptr;  // the shard group, host memory: the norm, host gathers
  Communicator* shard = nullptr;       // the shard group, backend memory: reduce-scatter, all-gather
  Communicator* replicas = nullptr;    // across the groups, backend memory; null without groups
  int count = 1;                       // ranks in the shard group
  int index = 0;                       // this rank's shard
  bool writer = true;                  // the replica in group 0 writes checkpoints
  static ShardComms of(const DistributedConfig& c);
  // An expert slice's domain of its experts (DistributedConfig::experts):
  // the world/N ranks holding the same slice (ExpertShards::replicas, on
  // the backend's memory), one per group; no replicas across.
  static ShardComms experts_of(const DistributedConfig& c);
};

class ShardCollectives {
 public:
  ShardCollectives(Backend& be, const ShardComms& c) : be_(be), c_(c) {}
  const ShardComms& comms() const { return c_; }
  int count() const { return c_.count; }
  int index() const { return c_.index; }
  // The backend's storage dtype (BF16 or F32): the dtype of every reduction.
  DType dtype() const;
  // Whether the shards have replicas in other groups (an all-reduce across).
  bool hybrid() const { return c_.replicas && c_.replicas->world() > 1; }

  // Sum-reduce-scatter of storage-dtype elements in backend memory (send:
  // count()·n, recv: n) inside the group, then the all-reduce of the shard
  // across the groups. Blocking.
  void reduce_scatter(const void* send, void* recv, size_t n);
  // The group's part only, started: wait_shard(ticket) completes it (the
  // caller runs the replicas' all-reduce after). One rank: the copy, at once.
  Communicator::Ticket reduce_scatter_start(const void* send, void* recv, size_t n);
  void wait_shard(Communicator::Ticket t);
  // The shard's all-reduce across the groups, started (hybrid() only).
  Communicator::Ticket replicas_all_reduce_start(void* buf, size_t n);
  void wait_replicas(Communicator::Ticket t) { c_.replicas->wait(t); }
  // All-gather inside the group (send: n, recv: count()·n). Blocking.
  void all_gather(const void* send, void* recv, size_t n);
  // Lets nonblocking collectives progress (MPI moves them only inside calls).
  void progress() { c_.shard->progress(); }
  // The global gradient norm from this rank's sum of squares of its shard:
  // summed over the shard group (every group holds the same summed shards).
  double norm(double sum_squares) const;

 private:
  Backend& be_;
  ShardComms c_;
};

}  // namespace ratchet
