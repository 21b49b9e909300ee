// See gather_ranges.h.
#include "distributed/gather_ranges.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace ratchet {

void gather_ranges_f32(Communicator* comm, int N, int r,
                       const std::function<OwnedRanges(int)>& ranges_of,
                       const std::function<void(float*, size_t, size_t)>& read_own, float* host) {
  RATCHET_ASSERT(N == 1 || (comm && comm->world() == N && comm->rank() == r));
  std::vector<OwnedRanges> of((size_t)N);
  size_t most = 0;
  for (int q = 0; q < N; q++) {
    of[(size_t)q] = ranges_of(q);
    size_t n = 0;
    for (const auto& [lo, hi] : of[(size_t)q]) n += hi - lo;
    most = std::max(most, n);
  }
  std::vector<float> all((size_t)N * most, 0.0f);
  float* mine = all.data() + (size_t)r * most;
  for (const auto& [lo, hi] : of[(size_t)r]) {
    read_own(mine, lo, hi - lo);
    mine += hi - lo;
  }
  if (N > 1) comm->all_gather(all.data() + (size_t)r * most, all.data(), most, DType::F32);
  for (int q = 0; q < N; q++) {
    const float* src = all.data() + (size_t)q * most;
    for (const auto& [lo, hi] : of[(size_t)q]) {
      std::copy(src, src + (hi - lo), host + lo);
      src += hi - lo;
    }
  }
}

void set_whole_master(Backend& be, dptr params, const float* fp32, size_t P) {
  std::vector<char> kept(P * be.storage_bytes());
  be.download_bytes(kept.data(), params, kept.size());
  be.upload_f32(params, fp32, P);
  be.upload_bytes(params, kept.data(), kept.size());
  be.synchronize();
}

}  // namespace ratchet
