// Data-parallel optimizer step: gradient averaging, and ZeRO-1 sharding of
// the AdamW state.
//
// Every rank holds the full parameters (P) and, after its micro-batches, the
// gradient of ITS rows, already scaled so that the SUM over ranks is the
// gradient of the global batch's mean loss (loss scale 1/(accum·W)).
//
// stage 0 (plain data parallel):
//   all_reduce(grads, P, sum) -> every rank runs the same AdamW on everything.
// stage 1 (ZeRO-1), shard size S = ceil(P / W), the padded length W·S:
//   gpad (W·S) = grads, zero-padded      (copy)
//   reduce_scatter(gpad -> gshard (S))   rank r gets the summed gradient of
//                                        [r·S, r·S+S); elements >= P are padding
//   norm = sqrt(all_reduce_sum(||gshard||^2))   the global norm, for clipping
//   AdamW on params[lo, hi) with lo = r·S, hi = min(P, lo+S): moments are
//                                        (hi-lo) long: 1/W of the state per rank
//   ppad (W·S): own shard copied in, then all_gather -> params (P)
// Any P works: the last shard is padded (it may even be empty when W > P).
// The buffers here are host memory: the CPU backend's (dptr is host memory).
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "model/param_layout.h"
#include "optim/adamw.h"

namespace ratchet {

struct ShardRange {
  size_t lo = 0, hi = 0;  // [lo, hi) of the flat vector; hi - lo may be 0
  size_t padded = 0;      // S: every rank's shard length in collectives
};
// Rank r's shard of P elements over W ranks (see above).
ShardRange shard_range(size_t P, int W, int r);

class DataParallel {
 public:
  // zero_stage 0 or 1. Creates the optimizer (sharded for stage 1).
  DataParallel(Communicator& comm, Backend& be, const ParamLayout& layout, const AdamWConfig& cfg,
               int zero_stage);
  AdamW& optimizer() { return *opt_; }
  int zero_stage() const { return stage_; }
  // The range of the optimizer state this rank owns (all of it for stage 0).
  ShardRange range() const { return range_; }

  // Averages the gradients over ranks and updates params as described above.
  // Returns the global gradient norm (before clipping). Same params on every
  // rank afterwards.
  float step(dptr params, dptr grads, float lr);

 private:
  Communicator& comm_;
  Backend& be_;
  size_t P_;
  int stage_;
  ShardRange range_;
  std::unique_ptr<AdamW> opt_;
  std::vector<float> gpad_, gshard_, ppad_;
};

}  // namespace ratchet
