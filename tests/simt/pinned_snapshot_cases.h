// The --ckpt-async snapshot buffer (ckpt/host_snapshot.h) on the cuda
// backend: shared by tests/simt (simt: plain host memory) and tests/gpu (a
// device: cudaHostAlloc'ed memory). Each case returns "" or what went wrong.
#pragma once
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "ckpt/host_snapshot.h"

namespace ratchet::testing::pinned {

// Distinct values, none of which BF16 holds exactly (the master copy must be
// what comes back, not its rounding).
inline std::vector<float> values(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = seed + 1e-3f * (float)i + 1.2345e-5f;
  return v;
}

inline std::string first_difference(const float* got, const std::vector<float>& want,
                                    const char* what) {
  for (size_t i = 0; i < want.size(); i++)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << got[i] << ", the device holds " << want[i];
      return os.str();
    }
  return "";
}

// A snapshot as CheckpointWriter::save takes one: FP32 parameters through
// download_f32 (BF16 storage: the master copy), moments through
// download_bytes_async after a device-side copy that is still in flight
// (the stream orders them), one synchronize(). Every value must be the
// device's, bit for bit; the block is kept across reserves that fit and
// replaced by one that does not.
template <class T>
std::string snapshot_equals_device(bool expect_pinned) {
  cuda::CudaBackend<T> be;
  const size_t n = 3001;  // not a multiple of anything the copies might round to
  const auto p = values(n, 1.f), m = values(n, -2.f), v = values(n, 3.f);
  void* params = be.alloc(n * be.storage_bytes());
  be.keep_master_copy(params);  // BF16: FP32 master (no-op for FP32 storage)
  be.upload_f32(params, p.data(), n);
  auto* dm = static_cast<float*>(be.alloc(n * sizeof(float)));
  auto* dv = static_cast<float*>(be.alloc(n * sizeof(float)));
  auto* staging = static_cast<float*>(be.alloc(2 * n * sizeof(float)));
  be.upload_bytes(staging, m.data(), n * sizeof(float));
  be.upload_bytes(staging + n, v.data(), n * sizeof(float));
  // Enqueued, not waited for: the snapshot's copies must come after them.
  be.copy(dm, staging, n * sizeof(float));
  be.copy(dv, staging + n, n * sizeof(float));

  HostSnapshot snap;
  snap.reserve(be, n);
  std::string err;
  if (snap.pinned() != expect_pinned)
    return std::string("pinned() is ") + (snap.pinned() ? "true" : "false") + " on " + be.name();
  if (snap.capacity() != n) return "capacity " + std::to_string(snap.capacity());
  // Two pieces, as a shard of two ranges is copied.
  const size_t cut = 1000;
  be.download_f32(snap.params(), params, cut);
  be.download_f32(snap.params() + cut, static_cast<char*>(params) + cut * be.storage_bytes(),
                  n - cut);
  be.download_bytes_async(snap.m(), dm, cut * sizeof(float));
  be.download_bytes_async(snap.m() + cut, dm + cut, (n - cut) * sizeof(float));
  be.download_bytes_async(snap.v(), dv, n * sizeof(float));
  be.synchronize();
  for (auto e : {first_difference(snap.params(), p, "params"), first_difference(snap.m(), m, "m"),
                 first_difference(snap.v(), v, "v")})
    if (err.empty()) err = e;
  if (!err.empty()) return be.name() + ": " + err;

  // Kept: a second save of the same (or a smaller) shard reuses the block.
  float* block = snap.params();
  snap.reserve(be, n);
  snap.reserve(be, n / 2);
  if (snap.params() != block || snap.capacity() != n) return "the block was not kept";
  snap.reserve(be, 2 * n);
  if (snap.capacity() != 2 * n) return "a larger shard did not grow the block";
  // The values of a second snapshot land in the new block too.
  be.download_bytes_async(snap.v() + n, dv, n * sizeof(float));
  be.synchronize();
  err = first_difference(snap.v() + n, v, "v after growing");
  if (!err.empty()) return be.name() + ": " + err;
  for (void* b : {params, (void*)dm, (void*)dv, (void*)staging}) be.release(b);
  return "";
}

}  // namespace ratchet::testing::pinned
