#include "dist/zero.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ratchet {

ShardRange shard_range(size_t P, int W, int r) {
  ShardRange s;
  s.padded = (P + W - 1) / W;
  s.lo = std::min(P, (size_t)r * s.padded);
  s.hi = std::min(P, s.lo + s.padded);
  return s;
}

DataParallel::DataParallel(Communicator& comm, Backend& be, const ParamLayout& layout,
                           const AdamWConfig& cfg, int zero_stage)
    : comm_(comm), be_(be), P_(layout.total), stage_(zero_stage) {
  if (stage_ != 0 && stage_ != 1) fail("--zero must be 0 or 1 (got ", stage_, ")");
  RATCHET_ASSERT(be_.storage_bytes() == sizeof(float));  // host FP32 buffers (cpu backend)
  if (stage_ == 1) {
    range_ = shard_range(P_, comm_.world(), comm_.rank());
    opt_ = std::make_unique<AdamW>(be_, layout, cfg, range_.lo, range_.hi);
    gpad_.assign(range_.padded * comm_.world(), 0.0f);
    gshard_.assign(std::max<size_t>(1, range_.padded), 0.0f);
    ppad_.assign(range_.padded * comm_.world(), 0.0f);
  } else {
    range_.lo = 0;
    range_.hi = range_.padded = P_;
    opt_ = std::make_unique<AdamW>(be_, layout, cfg);
  }
}

float DataParallel::step(dptr params, dptr grads, float lr) {
  const int W = comm_.world();
  if (stage_ == 0) {
    if (W > 1) comm_.all_reduce(grads, P_, DType::F32, ReduceOp::Sum);
    return opt_->step(params, grads, lr);
  }
  const size_t S = range_.padded, n = range_.hi - range_.lo;
  std::memcpy(gpad_.data(), grads, P_ * sizeof(float));  // the tail stays zero
  comm_.reduce_scatter(gpad_.data(), gshard_.data(), S, DType::F32, ReduceOp::Sum);
  const double ssq = n ? be_.sum_squares(gshard_.data(), n) : 0.0;
  const double norm = std::sqrt(comm_.all_reduce_sum(ssq));
  opt_->step_shard(params, gshard_.data(), lr, norm);
  float* own = ppad_.data() + (size_t)comm_.rank() * S;
  std::memcpy(own, (const float*)params + range_.lo, n * sizeof(float));
  comm_.all_gather(own, ppad_.data(), S, DType::F32);
  std::memcpy(params, ppad_.data(), P_ * sizeof(float));
  return (float)norm;
}

}  // namespace ratchet
