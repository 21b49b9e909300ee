// See reproducibility.h.
#include "train/reproducibility.h"

namespace ratchet {

std::map<std::string, std::string> reproducibility_settings(AttentionImpl attention,
                                                            bool deterministic) {
  const bool bitwise = deterministic || attention != AttentionImpl::cudnn;
  return {{"attention", attention_name(attention)},
          {"deterministic", deterministic ? "on" : "off"},
          {"reproducible", bitwise ? "bitwise"
                                   : "no (cuDNN attention with --deterministic off accumulates "
                                     "dQ atomically)"}};
}

std::string resume_bit_identity_warning(const std::map<std::string, std::string>& saved,
                                        const std::map<std::string, std::string>& now) {
  auto get = [](const std::map<std::string, std::string>& m, const char* k) {
    auto it = m.find(k);
    return it == m.end() ? std::string() : it->second;
  };
  std::string why;
  auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
  const std::string was = get(saved, "reproducible"), is = get(now, "reproducible");
  if (!was.empty() && was != "bitwise")
    add("the checkpoint was written by a run that was not bitwise reproducible: " + was);
  if (!is.empty() && is != "bitwise") add("this run is not bitwise reproducible: " + is);
  for (const char* k : {"attention", "deterministic"}) {
    const std::string a = get(saved, k), b = get(now, k);
    if (!a.empty() && !b.empty() && a != b)
      add(std::string("--") + k + " changed from " + a + " to " + b + " since the checkpoint");
  }
  // How the gradient is summed (distributed/shard_groups.h: ranks, micro-batches, --zero, --shard-group).
  // The orders themselves (gradient_sum_tree) where both runs recorded them,
  // so that the same additions described otherwise do not warn; the text of
  // the order for checkpoints from before.
  const std::string sum_was = get(saved, "gradient_sum"), sum_is = get(now, "gradient_sum");
  const std::string tree_was = get(saved, "gradient_sum_tree"),
                    tree_is = get(now, "gradient_sum_tree");
  const bool trees = !tree_was.empty() && !tree_is.empty();
  if (trees ? tree_was != tree_is : !sum_was.empty() && !sum_is.empty() && sum_was != sum_is)
    add("the gradient is summed in another order: " + sum_was + " when saved, " + sum_is +
        " now");
  // --expert-parallel (MoE): an expert's gradient is one GEMM over its
  // group's rows instead of per-rank GEMMs added by the strategy. Absent
  // (dense models, older checkpoints): 1.
  {
    std::string a = get(saved, "expert_parallel"), b = get(now, "expert_parallel");
    if (a.empty()) a = "1";
    if (b.empty()) b = "1";
    if (a != b)
      add("--expert-parallel changed from " + a + " to " + b +
          " since the checkpoint (the experts' gradients are summed in another order)");
  }
  if (why.empty()) return "";
  return "this resume will not be bit-identical to an uninterrupted run (" + why +
         "). For bit-identical resumes keep --deterministic on and the checkpoint's "
         "--attention";
}

}  // namespace ratchet
