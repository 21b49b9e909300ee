#include "backend/cuda/kernel_variants.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace ratchet {

std::vector<std::string> KernelVariants::known() {
  return {"classifier_v2", "layernorm_bwd_v2", "encoder_bwd_v2"};
}

std::string KernelVariants::names() const {
  std::string out;
  const bool on[] = {classifier_v2, layernorm_bwd_v2, encoder_bwd_v2};
  const auto all = known();
  for (size_t i = 0; i < all.size(); i++)
    if (on[i]) out += (out.empty() ? "" : ",") + all[i];
  return out;
}

KernelVariants KernelVariants::parse(const std::string& spec) {
  KernelVariants v;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    std::string name = spec.substr(at, comma - at);
    const size_t b = name.find_first_not_of(" \t"), e = name.find_last_not_of(" \t");
    name = b == std::string::npos ? "" : name.substr(b, e - b + 1);
    at = comma + 1;
    if (name.empty()) continue;
    if (name == "classifier_v2") v.classifier_v2 = true;
    else if (name == "layernorm_bwd_v2") v.layernorm_bwd_v2 = true;
    else if (name == "encoder_bwd_v2") v.encoder_bwd_v2 = true;
    else {
      std::string list;
      for (const auto& k : known()) list += (list.empty() ? "" : ", ") + k;
      fail(kEnv, "='", spec, "': unknown kernel variant '", name, "' (known: ", list,
           "; a bench-only knob for GPU A/B runs, bench/gpu/README.md; unset it for today's "
           "kernels)");
    }
  }
  return v;
}

KernelVariants KernelVariants::from_env() {
  const char* s = std::getenv(kEnv);
  return s ? parse(s) : KernelVariants{};
}

}  // namespace ratchet
