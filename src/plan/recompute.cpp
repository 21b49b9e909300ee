#include "plan/recompute.h"

#include "core/error.h"
#include "model/gpt.h"
#include "model/param_layout.h"

namespace ratchet::plan {

namespace {
size_t align64(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

const char* recompute_name(Recompute p) {
  switch (p) {
    case Recompute::kNone: return "none";
    case Recompute::kGelu: return "gelu";
    case Recompute::kGeluLn: return "gelu+ln";
    case Recompute::kBlocks: return "blocks";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute p : all_recompute_policies())
    if (name == recompute_name(p)) return p;
  fail("--recompute '", name, "' is not a policy: use none, gelu, gelu+ln or blocks");
}

std::vector<Recompute> all_recompute_policies() {
  return {Recompute::kNone, Recompute::kGelu, Recompute::kGeluLn, Recompute::kBlocks};
}

BlockActBytes block_act_bytes(const GPTConfig& cfg, int B, int T, size_t sb) {
  const size_t BT = (size_t)B * T, C = cfg.channels, NH = cfg.num_heads;
  const size_t stat = align64(BT * sizeof(float));  // one mean or rstd vector
  BlockActBytes b;
  b.fch_gelu = align64(BT * 4 * C * sb);
  b.ln = 2 * align64(BT * C * sb);
  b.residual_out = align64(BT * C * sb);
  b.total = b.ln + 4 * stat                     // ln1, ln2 and their mean/rstd
            + align64(BT * 3 * C * sb)          // qkv
            + align64(BT * C * sb)              // atty
            + align64((size_t)B * NH * T * T * sb)  // att
            + align64(BT * C * sb)              // r2
            + 2 * b.fch_gelu                    // fch, fch_gelu
            + b.residual_out;                   // r3
  return b;
}

size_t activation_bytes(const GPTConfig& cfg, int B, int T, size_t sb, Recompute p) {
  const size_t all = GPT::activation_bytes(cfg, B, T, sb);
  const BlockActBytes b = block_act_bytes(cfg, B, T, sb);
  const size_t L = cfg.num_layers;
  switch (p) {
    case Recompute::kNone: return all;
    case Recompute::kGelu: return all - L * b.fch_gelu;
    case Recompute::kGeluLn: return all - L * (b.fch_gelu + b.ln);
    case Recompute::kBlocks: return all - (L - 1) * (b.total - b.residual_out);
  }
  return all;
}

double recompute_flops_per_token(const GPTConfig& cfg, int T, Recompute p) {
  if (p != Recompute::kBlocks) return 0.0;
  ParamLayout lay(cfg);
  double layered = 0;  // parameters inside the blocks (all layers)
  for (int i = P_LN1W; i <= P_FCPROJB; i++) layered += (double)lay.sizes[i];
  return 2.0 * layered + 4.0 * cfg.num_layers * (double)cfg.channels * T;
}

}  // namespace ratchet::plan
