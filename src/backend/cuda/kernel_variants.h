// Candidate kernels beside today's, chosen at run time for an A/B measurement
// in a GPU window (issue 41; bench/gpu/README.md, window.sh's `ab` step). A
// bench-only knob, not a user flag: the environment variable
// RATCHET_KERNEL_VARIANT (comma-separated names), read once by the cuda
// backend when it is made. Unset or empty: today's kernels, unchanged. To be
// removed once a window has decided each candidate (kept: it becomes the
// default; slower: it is deleted).
#pragma once
#include <string>
#include <vector>

namespace ratchet {

struct KernelVariants {
  bool classifier_v2 = false;     // kernels/classifier_v2.cu: each row read once (registers)
  bool layernorm_bwd_v2 = false;  // kernels/norm_backward.cuh: one warp per row
  bool encoder_bwd_v2 = false;    // kernels/encoder.cu: a run's rows in flight 8 at a time

  bool any() const { return classifier_v2 || layernorm_bwd_v2 || encoder_bwd_v2; }
  // The names selected, comma-separated in the known order ("" when none).
  std::string names() const;

  static constexpr const char* kEnv = "RATCHET_KERNEL_VARIANT";
  // Every name the variable takes.
  static std::vector<std::string> known();
  // spec: comma-separated names (blanks around them ignored, repeats allowed).
  // An unknown name fails (ratchet::Error) naming the variable and listing the
  // known names.
  static KernelVariants parse(const std::string& spec);
  // parse(getenv(kEnv)), or none when it is unset.
  static KernelVariants from_env();
};

}  // namespace ratchet
