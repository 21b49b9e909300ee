#include "model/rope_table.h"

#include <cmath>

namespace ratchet {

std::vector<double> rope_inv_freq(const GPTConfig& cfg) {
  const int hs = cfg.head_size(), half = hs / 2;
  std::vector<double> f(half);
  for (int i = 0; i < half; i++) f[i] = std::pow((double)cfg.rope_theta, -2.0 * i / hs);
  if (cfg.rope_factor == 0) return f;
  const double factor = cfg.rope_factor, low = cfg.rope_low_freq_factor,
               high = cfg.rope_high_freq_factor, orig = cfg.rope_original_max_pos;
  const double lo_wavelen = orig / low, hi_wavelen = orig / high;
  for (double& fi : f) {
    const double wavelen = 2 * M_PI / fi;
    if (wavelen < hi_wavelen) continue;
    if (wavelen > lo_wavelen) {
      fi /= factor;
    } else {
      const double s = (orig / wavelen - low) / (high - low);
      fi = (1 - s) * fi / factor + s * fi;
    }
  }
  return f;
}

std::vector<float> rope_cos_sin(const GPTConfig& cfg, int maxT) {
  const std::vector<double> f = rope_inv_freq(cfg);
  const size_t half = f.size();
  std::vector<float> tab(2 * (size_t)maxT * half);
  float* cos_t = tab.data();
  float* sin_t = tab.data() + (size_t)maxT * half;
  for (int t = 0; t < maxT; t++)
    for (size_t i = 0; i < half; i++) {
      const double ang = t * f[i];
      cos_t[t * half + i] = (float)std::cos(ang);
      sin_t[t * half + i] = (float)std::sin(ang);
    }
  return tab;
}

}  // namespace ratchet
