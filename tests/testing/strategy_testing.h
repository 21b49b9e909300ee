// Data-parallel strategies built the way the tests want them: make_strategy()
// from positional settings, and a rank's needs (distributed/strategy.h).
#pragma once
#include <memory>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "optim/adamw.h"
#include "testing/tiny_model.h"

namespace ratchet {
struct ShardGroups;
}

namespace ratchet::testing {

inline std::unique_ptr<DistributedStrategy> make_dp(Communicator& comm, Backend& be,
                                                    const ParamLayout& layout, const AdamWConfig& ac,
                                                    int stage, Communicator* device = nullptr,
                                                    const ShardGroups* groups = nullptr,
                                                    bool overlap = false, bool reshard = true) {
  DistributedConfig d;
  d.stage = stage;
  d.overlap = overlap;
  d.reshard_after_forward = reshard;
  d.adamw = ac;
  d.host = &comm;
  d.device = device;
  d.groups = groups;
  return make_strategy(d, be, layout);
}

// Shard r of W at `stage`.
inline StrategyNeeds needs_of(const BackendMemoryModel& be, const GPTConfig& cfg, int W, int r,
                              int stage, bool overlap = false, bool reshard = true) {
  DistributedConfig d;
  d.stage = stage;
  d.overlap = overlap;
  d.reshard_after_forward = reshard;
  return strategy_needs(d, be, cfg, W, r);
}

// The same per field, as the tests ask them (the memory model matters only
// for buffer_bytes).
inline bool flat_grads(int stage) {
  return needs_of(BackendMemoryModel{}, tiny_config(), 2, 0, stage).flat_grads;
}
inline bool flat_params(int stage) {
  return needs_of(BackendMemoryModel{}, tiny_config(), 2, 0, stage).flat_params;
}
inline bool master_sharded(int stage, int W) {
  return needs_of(BackendMemoryModel{}, tiny_config(), W, 0, stage).master_sharded;
}
inline OwnedRanges owned_ranges(const GPTConfig& c, int W, int r, int stage, bool overlap = false) {
  return needs_of(BackendMemoryModel{}, c, W, r, stage, overlap).owned;
}
inline size_t moment_elems(const GPTConfig& c, int W, int r, int stage, bool overlap = false) {
  return needs_of(BackendMemoryModel{}, c, W, r, stage, overlap).moment_elems;
}
inline size_t buffer_bytes(const BackendMemoryModel& be, const GPTConfig& c, int W, int stage,
                           bool overlap = false, bool reshard = true) {
  return needs_of(be, c, W, 0, stage, overlap, reshard).buffer_bytes;
}

}  // namespace ratchet::testing
