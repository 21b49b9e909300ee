#include "model/recompute.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "model/param_layout.h"

namespace ratchet {

std::string Recompute::name() const {
  switch (kind) {
    case kNone: return "none";
    case kGelu: return "gelu";
    case kGeluLn: return "gelu+ln";
    case kBlocks: return every == 1 ? "blocks" : "blocks:" + std::to_string(every);
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  Recompute r;
  if (name == "none") return r;
  if (name == "gelu") {
    r.kind = Recompute::kGelu;
    return r;
  }
  if (name == "gelu+ln") {
    r.kind = Recompute::kGeluLn;
    return r;
  }
  if (name == "blocks") {
    r.kind = Recompute::kBlocks;
    return r;
  }
  if (name.rfind("blocks:", 0) == 0) {
    const std::string k = name.substr(7);
    char* end = nullptr;
    const long every = k.empty() ? 0 : std::strtol(k.c_str(), &end, 10);
    if (end && *end == '\0' && every >= 1 && every <= 1000000) {
      r.kind = Recompute::kBlocks;
      r.every = (int)every;
      return r;
    }
    fail("--recompute '", name, "': k in blocks:k must be a whole number >= 1 (every k-th layer "
         "is recomputed)");
  }
  fail("--recompute '", name, "' is not a policy: use none, gelu, gelu+ln, blocks or blocks:k");
}

std::vector<Recompute> standard_recompute_policies() {
  std::vector<Recompute> v(4);
  v[1].kind = Recompute::kGelu;
  v[2].kind = Recompute::kGeluLn;
  v[3].kind = Recompute::kBlocks;
  return v;
}

double recompute_flops_per_token(const GPTConfig& cfg, int T, const Recompute& p,
                                 bool gelu_by_gemm) {
  if (p.shares_gelu())  // Llama's SwiGLU has no GEMM epilogue: its recompute is a kernel
    return gelu_by_gemm && !cfg.llama()
               ? 2.0 * cfg.channels * (double)cfg.ffn() * cfg.num_layers
               : 0.0;
  const int n = p.blocks_recomputed(cfg.num_layers);
  if (n == 0) return 0.0;
  ParamLayout lay(cfg);
  double layered = 0;  // parameters inside the blocks (all layers)
  for (int i : kBlockTensors) layered += (double)lay.sizes[i];
  // Each recomputed block: its matmuls again, and attention's 4·keys·(NH·hs)
  // (a third of train_flops_per_token's 12·(NH·hs)·keys), keys = T, or
  // min(T, W) on a sliding layer (issue 38), as train_flops_per_token counts
  // them: recompute.h's 4·L·C·T for every layer of a model without windows.
  const double Cq = cfg.llama() ? cfg.attn_channels() : cfg.channels;
  double flops = 0;
  for (int l = 0; l < cfg.num_layers; l++) {
    if (!p.recomputes_block(l)) continue;
    const int W = cfg.llama() ? cfg.window(l) : 0;
    flops += 2.0 * layered / cfg.num_layers + 4.0 * Cq * (W > 0 ? std::min(T, W) : T);
  }
  return flops;
}

}  // namespace ratchet
