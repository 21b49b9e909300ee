// Every owner's FP32 values of its flat ranges, gathered on the host: the
// one gather behind params_f32(), sync_master() and ZeRO-3's get_host().
// Each of the N ranks packs its owned values (padded to the largest count),
// the packs are all-gathered on the host, and every rank unpacks them by
// every rank's ranges into the full vector.
#pragma once
#include <cstddef>
#include <functional>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"

namespace ratchet {

// Collective over `comm` (N ranks, this one r; null when N is 1). ranges_of(q):
// rank q's owned ranges (the same answer on every rank); read_own(dst, lo, n):
// this rank's FP32 values of [lo, lo+n). `host` receives every owned element
// (P floats; elements no rank owns are left as they were).
void gather_ranges_f32(Communicator* comm, int N, int r,
                       const std::function<OwnedRanges(int)>& ranges_of,
                       const std::function<void(float* dst, size_t lo, size_t n)>& read_own,
                       float* host);

// Sets the backend's whole FP32 master of `params` (P storage elements) to
// `fp32`, keeping the storage values (upload_f32 alone would round them to
// nearest; the owners' are stochastically rounded). For sync_master().
void set_whole_master(Backend& be, dptr params, const float* fp32, size_t P);

}  // namespace ratchet
