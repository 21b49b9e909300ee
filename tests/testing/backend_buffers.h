// Helpers for op-level backend tests: integer buffers in backend memory and
// seeded normal samples.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"

namespace ratchet::testing {

// Integer buffer (tokens, targets) in backend memory.
class IntBuf {
 public:
  IntBuf(Backend& be, const std::vector<int>& v) : be_(be) {
    p_ = static_cast<int*>(be.alloc(v.size() * sizeof(int)));
    be.upload_bytes(p_, v.data(), v.size() * sizeof(int));
  }
  ~IntBuf() { be_.release(p_); }
  IntBuf(const IntBuf&) = delete;
  IntBuf& operator=(const IntBuf&) = delete;
  const int* get() const { return p_; }

 private:
  Backend& be_;
  int* p_;
};

inline std::vector<float> randn(Rng& rng, size_t n, float scale = 1.0f, float offset = 0.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = offset + scale * rng.normal();
  return v;
}

}  // namespace ratchet::testing
