// Input the BPE model has no token for (issue 36): bytes that became the unk
// token, and characters dropped because there is no unk token (the Rust
// library drops them too, silently). Counted per thread (the shard pipeline
// tokenizes on many): a caller reads its own thread's counts around an
// encode, or sums what its threads report.
#pragma once
#include <cstdint>

namespace ratchet::hf {

struct UnknownCounts {
  uint64_t unk_bytes = 0;      // bytes of input that became the unk token
  uint64_t dropped_chars = 0;  // characters (or bytes, for byte-level models) dropped
};

// This thread's running totals (never reset; take differences).
UnknownCounts& thread_unknown_counts();

}  // namespace ratchet::hf
