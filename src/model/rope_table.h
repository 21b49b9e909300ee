// The RoPE cos/sin table the model hands to Backend::rope_forward/backward.
//
// Inverse frequencies f_i = theta^(-2i/hs), i < hs/2 (Hugging Face's
// _compute_default_rope_parameters), optionally rescaled as Llama 3.1 does
// (HF's _compute_llama3_parameters, rope_type "llama3"): with wavelength
// w_i = 2π/f_i, lo = original_max_pos/low_freq_factor and
// hi = original_max_pos/high_freq_factor,
//   w_i < hi            f_i unchanged            (high frequencies)
//   w_i > lo            f_i / factor             (low frequencies)
//   otherwise           (1-s)·f_i/factor + s·f_i, s = (original_max_pos/w_i - low)/(high - low)
// Table layout (FP32): (maxT, hs/2) cos(t·f_i), then (maxT, hs/2) sin(t·f_i).
// Computed in double and rounded once; HF computes t·f_i in float32, so its
// angles differ from these by up to ~t·2^-24 rad (exact at t = 0).
#pragma once
#include <vector>

#include "model/config.h"

namespace ratchet {

std::vector<double> rope_inv_freq(const GPTConfig& cfg);  // (hs/2)
std::vector<float> rope_cos_sin(const GPTConfig& cfg, int maxT);  // (2, maxT, hs/2)

}  // namespace ratchet
