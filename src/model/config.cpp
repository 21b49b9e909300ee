#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "model/family_defaults.h"

namespace ratchet {

const char* arch_name(Arch a) { return a == Arch::llama ? "llama" : "gpt2"; }

Arch parse_arch(const std::string& s, const char* what) {
  if (s == "gpt2") return Arch::gpt2;
  if (s == "llama") return Arch::llama;
  fail(what, " '", s, "' is not an architecture: use gpt2 or llama");
}

const char* family_name(Family f) {
  switch (f) {
    case Family::llama: return "llama";
    case Family::qwen2: return "qwen2";
    case Family::qwen3: return "qwen3";
    case Family::olmo2: return "olmo2";
    case Family::smollm3: return "smollm3";
    case Family::mistral: return "mistral";
    case Family::gemma3: return "gemma3_text";
    case Family::qwen3_moe: return "qwen3_moe";
    case Family::olmoe: return "olmoe";
    case Family::mixtral: return "mixtral";
    case Family::dots1: return "dots1";
    case Family::qwen2_moe: return "qwen2_moe";
  }
  return "llama";
}

bool parse_family(const std::string& t, Family* f) {
  for (Family x : {Family::llama, Family::qwen2, Family::qwen3, Family::olmo2, Family::smollm3,
                   Family::mistral, Family::gemma3, Family::qwen3_moe, Family::olmoe, Family::mixtral,
                   Family::dots1, Family::qwen2_moe})
    if (t == family_name(x)) return *f = x, true;
  return false;
}

const ConfigFieldNames kFlagNames = {"--layers",     "--heads",      "--channels",
                                     "--kv-heads",   "--ffn-hidden", "--vocab-size",
                                     "--max-seq-len", "--norm-eps",  "--rope-theta",
                                     "rope scaling original_max_position_embeddings"};
const ConfigFieldNames kCheckpointNames = {
    "num_layers", "num_heads",   "channels", "num_kv_heads", "ffn_hidden",
    "vocab_size", "max_seq_len", "norm_eps", "rope_theta",   "rope_original_max_pos"};

int GPTConfig::moe_layer_count() const {
  int n = 0;
  for (int l = 0; l < num_layers; l++) n += layer_is_moe(l);
  return n;
}

double GPTConfig::param_count() const {
  const double C = channels, L = num_layers, V = std::max(padded_vocab, vocab_size),
               hs = head_dim > 0 ? head_dim : (num_heads > 0 ? channels / num_heads : 0),
               QC = (double)num_heads * hs, KVC = (double)kv_heads() * hs,
               H = ffn_hidden > 0 ? ffn_hidden : 4.0 * channels;
  // llama: wte (+ lm_head), q, o (C·NH·hs each), k, v (C·KV·hs each), gate,
  // up, down (C·H each), the norms (and the options' biases and q/k norms);
  // GPT-2: wte, wpe, 12C² + 13C per layer, lnf.
  if (llama()) {
    const double norms = (has_pre_norms() ? 2 * C : 0) + (has_post_norms() ? 2 * C : 0);
    const double qk = qk_norm == QkNorm::per_head ? 2 * hs : qk_norm == QkNorm::full_width ? QC + KVC : 0;
    const double bias = qkv_bias ? QC + 2 * KVC : 0;
    // MoE (issue 39): a MoE layer's MLP is the gate (E·C) and E experts
    // (3·C·I each) instead of the dense 3·C·H. Counted as the model has them
    // (ParamLayout allocates (L, ...) slices; see param_layout.h).
    double mlp = L * 3 * C * H;
    if (num_experts > 0) {
      const double Lm = moe_layer_count(), E = num_experts, I = moe_ffn_hidden;
      // plus the shared experts (3·C·Is: Is = I·n_shared_experts, or
      // Qwen2-MoE's shared_expert_ffn with its gate row, C) of each MoE layer
      const double Is = n_shared_experts > 0 ? (double)n_shared_experts * I : std::max(shared_expert_ffn, 0);
      const double gate = shared_expert_ffn > 0 ? C : 0;
      mlp = (L - Lm) * 3 * C * H + Lm * (E * C + E * 3 * C * I + 3 * C * Is + gate);
    }
    return V * C * (tied_embeddings ? 1 : 2) +
           L * (2 * C * QC + 2 * C * KVC + norms + qk + bias) + mlp + C;
  }
  return V * C + (double)max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
}

void GPTConfig::finalize(const ConfigFieldNames& n) {
  // Each size against its bound first (config.h), so that nothing below, nor
  // any caller, computes with a value no model has.
  const std::pair<const char*, std::pair<int, int>> bounded[] = {
      {n.layers, {num_layers, kMaxLayers}},   {n.heads, {num_heads, kMaxHeads}},
      {n.channels, {channels, kMaxChannels}}, {n.ffn_hidden, {ffn_hidden, kMaxFfnHidden}},
      {n.vocab_size, {vocab_size, kMaxVocab}}, {n.max_seq_len, {max_seq_len, kMaxSeqLen}},
      {n.kv_heads, {num_kv_heads, kMaxHeads}}};
  for (const auto& [name, v] : bounded)
    if (v.first > v.second)
      fail(name, " ", v.first, " is out of range (at most ", v.second,
           "; larger than any model ratchet can hold)");
  if (num_layers < 1) fail(n.layers, " must be at least 1 (got ", num_layers, ")");
  if (num_heads < 1) fail(n.heads, " must be at least 1 (got ", num_heads, ")");
  if (channels < 1 || (head_dim == 0 && channels % num_heads != 0))
    fail(n.channels, " ", channels, " must be a positive multiple of ", n.heads, " ", num_heads,
         head_dim == 0 ? " (or give head_dim)" : "");
  if (head_dim < 0 || head_dim > kMaxChannels)
    fail("head_dim ", head_dim, " must be positive (or 0: channels / heads)");
  if (vocab_size < 2) fail(n.vocab_size, " must be at least 2 (got ", vocab_size, ")");
  if (max_seq_len < 1) fail(n.max_seq_len, " must be at least 1 (got ", max_seq_len, ")");
  if (padded_vocab < vocab_size) padded_vocab = pad_vocab(vocab_size);
  if (padded_vocab > kMaxVocab)
    fail("the padded vocab ", padded_vocab, " (", n.vocab_size, " rounded up) is out of range (at most ",
         kMaxVocab, ")");
  if (num_kv_heads < 0 || num_heads % kv_heads() != 0)
    fail(n.kv_heads, " ", num_kv_heads, " must divide ", n.heads, " ", num_heads,
         " (1 is multi-query attention, ", n.heads, " is full multi-head)");
  if (ffn_hidden < 0) fail(n.ffn_hidden, " must be positive (got ", ffn_hidden, ")");
  if (rope_original_max_pos > kMaxSeqLen)
    fail(n.rope_original_max_pos, " ", rope_original_max_pos, " is out of range (at most ",
         kMaxSeqLen, ")");
  // Every field may be in range and the product still not be a model (10^6
  // layers of 10^6 channels): bounded here, in floating point, so that the
  // exact counts (size_t) made from this config cannot overflow.
  const double params = param_count();
  if (params > kMaxParams)
    fail("the model has ", params, " parameters (", n.layers, " ", num_layers, ", ", n.channels, " ",
         channels, ", ", n.vocab_size, " ", vocab_size, "), more than ratchet holds (",
         kMaxParams, " = 2^46): choose a smaller model");
  check_deepseek_routing();  // before GPT-2 returns: its configs must not carry them either
  check_gated_shared_expert();
  if (arch == Arch::gpt2) {
    // GPT-2 has none of the llama options; refuse them rather than ignore them.
    if (kv_heads() != num_heads)
      fail(n.kv_heads, " ", num_kv_heads, " needs --arch llama (GPT-2 has one KV head per head)");
    if (ffn() != 4 * channels)
      fail(n.ffn_hidden, " ", ffn_hidden, " needs --arch llama (GPT-2's MLP is 4 x channels)");
    if (!tied_embeddings) fail("untied embeddings need --arch llama (GPT-2 ties wte and lm_head)");
    if (family != Family::llama || head_dim != 0 || qkv_bias || qk_norm != QkNorm::none ||
        norm_placement != NormPlacement::pre || norm_unit_offset || embed_scale ||
        attn_scale != 0 || mlp_act != MlpAct::silu || attn_softcap != 0 || final_softcap != 0 ||
        sliding_window != 0 || !layer_sliding.empty() || !layer_rope.empty() ||
        rope_local_theta != 0 || num_experts != 0 || clip_qkv != 0)
      fail("a llama-family option (", family_name(family), ") is set on a GPT-2 config");
    return;
  }
  if (head_size() % 2 != 0)
    fail(head_dim > 0 ? "head_dim" : n.channels, head_dim > 0 ? "" : " / ",
         head_dim > 0 ? "" : n.heads, " = ", head_size(), " must be even for RoPE (it rotates pairs)");
  const auto per_layer = [&](const std::vector<uint8_t>& v, const char* what) {
    if (!v.empty() && v.size() != (size_t)num_layers)
      fail(what, " has ", v.size(), " entries but the model has ", num_layers, " layers (",
           n.layers, "): give one per layer");
  };
  per_layer(layer_sliding, "the per-layer sliding-window list (layer_types)");
  per_layer(layer_rope, "the per-layer RoPE list (no_rope_layers)");
  if (sliding_window < 0) fail("sliding_window must be positive (got ", sliding_window, ")");
  if (sliding_window == 0 && std::count(layer_sliding.begin(), layer_sliding.end(), 1) > 0)
    fail("sliding layers need a sliding_window > 0");
  for (const auto& [v, what] : {std::pair<float, const char*>{attn_scale, "the attention scale"},
                                {attn_softcap, "attn_logit_softcapping"},
                                {final_softcap, "final_logit_softcapping"},
                                {rope_local_theta, "rope_local_base_freq"}})
    if (!(v >= 0) || !std::isfinite(v)) fail(what, " must be a positive finite number (got ", v, ")");
  if (rope_local_theta != 0 && !(rope_local_theta > 1))
    fail("rope_local_base_freq must be greater than 1 (got ", rope_local_theta, ")");
  if (num_experts != 0 || experts_per_tok != 0 || moe_ffn_hidden != 0 || !mlp_only_layers.empty()) {
    if (num_experts < 1 || num_experts > kMaxExperts)
      fail("num_experts ", num_experts, " must be between 1 and ", kMaxExperts);
    if (experts_per_tok < 1 || experts_per_tok > num_experts)
      fail("num_experts_per_tok ", experts_per_tok, " must be between 1 and num_experts ",
           num_experts, " (each token goes to that many experts)");
    if (moe_ffn_hidden < 1 || moe_ffn_hidden > kMaxFfnHidden)
      fail("moe_intermediate_size ", moe_ffn_hidden, " must be between 1 and ", kMaxFfnHidden);
    if (decoder_sparse_step < 1)
      fail("decoder_sparse_step ", decoder_sparse_step, " must be at least 1");
    for (int d : mlp_only_layers)
      if (d < 0 || d >= num_layers)
        fail("mlp_only_layers names layer ", d, " but the model has layers 0..", num_layers - 1);
  }
  if (!(router_aux_loss_coef >= 0) || !std::isfinite(router_aux_loss_coef))
    fail("router_aux_loss_coef must be a finite number >= 0 (got ", router_aux_loss_coef, ")");
  if (!(clip_qkv >= 0) || !std::isfinite(clip_qkv))
    fail("clip_qkv must be a positive finite number, or 0 for none (got ", clip_qkv, ")");
  if (!(norm_eps > 0) || !std::isfinite(norm_eps))
    fail(n.norm_eps, " must be a positive finite number (got ", norm_eps, ")");
  if (!(rope_theta > 1) || !std::isfinite(rope_theta))
    fail(n.rope_theta, " must be a finite number greater than 1 (got ", rope_theta, ")");
  if (rope_factor != 0) {
    if (!(rope_factor >= 1))
      fail("rope scaling factor must be >= 1, or 0 for none (got ", rope_factor, ")");
    if (!(rope_low_freq_factor > 0) || !(rope_high_freq_factor > rope_low_freq_factor))
      fail("rope scaling needs 0 < low_freq_factor < high_freq_factor (got ",
           rope_low_freq_factor, ", ", rope_high_freq_factor, ")");
    if (rope_original_max_pos < 1)
      fail(n.rope_original_max_pos, " must be positive (got ",
           rope_original_max_pos, ")");
  }
}

// DeepSeek-V3's routing options (docs/moe.md): sigmoid scores, the routed
// scaling, the selection bias and the shared experts run in the model;
// group-limited selection is refused by name until it does.
void GPTConfig::check_deepseek_routing() const {
  if (!(routed_scaling_factor > 0) || !std::isfinite(routed_scaling_factor))
    fail("routed_scaling_factor must be a positive finite number (got ", routed_scaling_factor,
         "); 1 leaves the routing weights as they are");
  if (!(moe_bias_update_rate >= 0) || !std::isfinite(moe_bias_update_rate))
    fail("the selection bias's update rate must be a finite number >= 0 (got ",
         moe_bias_update_rate, ")");
  const bool deepseek = moe_sigmoid || routed_scaling_factor != 1.f || n_shared_experts != 0 ||
                        moe_selection_bias || moe_bias_update_rate != 0 || n_group != 1 ||
                        topk_group != 1;
  if (!deepseek) return;
  if (!moe())
    fail("scoring_func, routed_scaling_factor, n_shared_experts, e_score_correction_bias and "
         "n_group are MoE options, but the model has no experts (num_experts 0)");
  // Group-limited selection: the flags' names too, since that is where a
  // custom model's values come from (HF configs name the fields the same).
  if (n_group < 1 || num_experts % n_group != 0)
    fail("n_group (--moe-n-group) is ", n_group, " with ", num_experts,
         " experts; it must be >= 1 and divide num_experts (--num-experts)");
  if (topk_group < 1 || topk_group > n_group)
    fail("topk_group (--moe-topk-group) is ", topk_group, " with n_group ", n_group,
         "; it must be between 1 and n_group");
  if ((long long)experts_per_tok > (long long)topk_group * (num_experts / n_group))
    fail("num_experts_per_tok (--experts-per-tok) ", experts_per_tok, " exceeds topk_group ",
         topk_group, " x ", num_experts / n_group,
         " experts per group (num_experts / n_group): raise --moe-topk-group or lower "
         "--experts-per-tok");
  if (n_shared_experts < 0)
    fail("n_shared_experts ", n_shared_experts, " must be >= 0");
  if ((double)n_shared_experts * moe_ffn_hidden > kMaxFfnHidden)
    fail("n_shared_experts ", n_shared_experts, " times moe_intermediate_size ", moe_ffn_hidden,
         " (the shared experts' hidden size) must be at most ", kMaxFfnHidden);
  if (moe_bias_update_rate > 0 && !moe_selection_bias)
    fail("the selection bias's update rate ", moe_bias_update_rate,
         " needs the selection bias (moe_selection_bias): --moe-bias-update-rate sets both");
}

// Qwen2-MoE's gated shared expert (shared_expert_ffn): a width in range, on
// a model with experts, and not beside DeepSeek-V3's shared experts (the two
// would share shw1 / shw2).
void GPTConfig::check_gated_shared_expert() const {
  if (shared_expert_ffn == 0) return;
  if (shared_expert_ffn < 0 || shared_expert_ffn > kMaxFfnHidden)
    fail("shared_expert_intermediate_size (--shared-expert-ffn) ", shared_expert_ffn,
         " must be between 1 and ", kMaxFfnHidden, ", or 0 for no shared expert");
  if (!moe())
    fail("shared_expert_intermediate_size (--shared-expert-ffn) ", shared_expert_ffn,
         " is a Mixture-of-Experts option, but the model has no experts (num_experts 0)");
  if (n_shared_experts != 0)
    fail("shared_expert_intermediate_size (--shared-expert-ffn) ", shared_expert_ffn, " and n_shared_experts (",
         "--n-shared-experts) ", n_shared_experts, " are both set: a model has Qwen2-MoE's one gated shared "
         "expert or DeepSeek-V3's ungated shared experts, not both");
}

std::string GPTConfig::describe() const {
  std::ostringstream os;
  if (arch == Arch::llama) os << "llama ";
  os << "L=" << num_layers << " H=" << num_heads << " C=" << channels << " V=" << vocab_size
     << " Vp=" << padded_vocab << " maxT=" << max_seq_len;
  if (arch == Arch::llama) {
    os << " KV=" << kv_heads() << " ffn=" << ffn() << " theta=" << rope_theta
       << (tied_embeddings ? " tied" : " untied");
    if (rope_factor != 0) os << " rope_scaling=llama3(" << rope_factor << ")";
    if (family != Family::llama) os << " family=" << family_name(family);
    if (head_dim != 0) os << " head_dim=" << head_dim;
    if (sliding_window != 0) os << " window=" << sliding_window;
    if (num_experts > 0)
      os << " experts=" << num_experts << " top" << experts_per_tok << " moe_ffn=" << moe_ffn_hidden
         << " moe_layers=" << moe_layer_count();
    if (moe_sigmoid) os << " scoring=sigmoid";  // DeepSeek-V3 routing: only when not the default
    if (routed_scaling_factor != 1.f) os << " routed_scale=" << routed_scaling_factor;
    if (n_shared_experts > 0) os << " shared_experts=" << n_shared_experts;
    if (shared_expert_ffn > 0) os << " gated_shared_ffn=" << shared_expert_ffn;
    if (n_group != 1) os << " groups=" << topk_group << "/" << n_group;
  }
  return os.str();
}

// The named presets (published models), for the messages listing them.
static const char* const kNamedModels =
    "smollm-135m, llama3.2-1b, llama3.1-8b, qwen2.5-0.5b, qwen3-0.6b, qwen3-1.7b, qwen3-8b, olmo2-1b, "
    "smollm3-3b, mistral-7b, gemma3-270m, gemma3-1b, qwen3-30b-a3b, olmoe-1b-7b, mixtral-8x7b, dots.llm1, qwen1.5-moe-a2.7b";

// "d12" -> 12, "l6" -> 6 for prefix 'd'/'l'; 0 if `name` is not that form.
static int depth_of(const std::string& name, char prefix) {
  if (name.size() < 2 || name[0] != prefix) return 0;
  try {
    size_t pos = 0;
    int depth = std::stoi(name.substr(1), &pos);
    return pos == name.size() - 1 ? depth : 0;
  } catch (...) {
    return 0;
  }
}

// preset_config (config.h) also knows these named presets: the 2026
// families' published shapes (issue 38), each from its model's
// config.json on the Hugging Face hub (the repository in the comment);
// test_presets checks each against its published parameter count.
static void qwen3_shape(GPTConfig* c, int L, int C, int NH, int KV, int H, bool tied) {
  c->family = Family::qwen3;
  c->num_layers = L, c->channels = C, c->num_heads = NH, c->num_kv_heads = KV, c->ffn_hidden = H;
  c->head_dim = 128, c->qk_norm = QkNorm::per_head;
  c->vocab_size = 151936, c->rope_theta = 1000000.f, c->norm_eps = 1e-6f, c->tied_embeddings = tied;
}
static void gemma3_shape(GPTConfig* c, int L, int C, int H) {
  c->family = Family::gemma3;
  c->num_layers = L, c->channels = C, c->num_heads = 4, c->num_kv_heads = 1, c->ffn_hidden = H;
  c->head_dim = 256;  // query_pre_attn_scalar 256 = head_dim: the default scale (attn_scale 0)
  c->vocab_size = 262144, c->rope_theta = 1000000.f, c->rope_local_theta = 10000.f, c->norm_eps = 1e-6f;
  c->qk_norm = QkNorm::per_head, c->norm_placement = NormPlacement::sandwich;
  c->norm_unit_offset = true, c->embed_scale = true, c->mlp_act = MlpAct::gelu_tanh;
  c->sliding_window = 512;
  c->layer_sliding.assign(L, 1);  // sliding_window_pattern 6: every 6th layer full
  for (int l = 5; l < L; l += 6) c->layer_sliding[l] = 0;
}
static bool family_preset(const std::string& name, GPTConfig* c) {
  if (name == "qwen2.5-0.5b") {  // Qwen/Qwen2.5-0.5B (use_sliding_window false)
    c->family = Family::qwen2, c->qkv_bias = true;
    c->num_layers = 24, c->channels = 896, c->num_heads = 14, c->num_kv_heads = 2, c->ffn_hidden = 4864;
    c->vocab_size = 151936, c->rope_theta = 1000000.f, c->norm_eps = 1e-6f, c->tied_embeddings = true;
  } else if (name == "qwen3-0.6b") {  // Qwen/Qwen3-0.6B
    qwen3_shape(c, 28, 1024, 16, 8, 3072, true);
  } else if (name == "qwen3-1.7b") {  // Qwen/Qwen3-1.7B
    qwen3_shape(c, 28, 2048, 16, 8, 6144, true);
  } else if (name == "qwen3-8b") {  // Qwen/Qwen3-8B
    qwen3_shape(c, 36, 4096, 32, 8, 12288, false);
  } else if (name == "olmo2-1b") {  // allenai/OLMo-2-0425-1B
    c->family = Family::olmo2, c->norm_placement = NormPlacement::post, c->qk_norm = QkNorm::full_width;
    c->num_layers = 16, c->channels = 2048, c->num_heads = 32, c->num_kv_heads = 32, c->ffn_hidden = 8192;
    c->vocab_size = 100352, c->rope_theta = 500000.f, c->norm_eps = 1e-6f, c->tied_embeddings = false;
  } else if (name == "smollm3-3b") {  // HuggingFaceTB/SmolLM3-3B (no_rope_layers: every 4th NoPE)
    c->family = Family::smollm3;
    c->num_layers = 36, c->channels = 2048, c->num_heads = 16, c->num_kv_heads = 4, c->ffn_hidden = 11008;
    c->vocab_size = 128256, c->rope_theta = 5000000.f, c->norm_eps = 1e-6f, c->tied_embeddings = true;
    c->layer_rope.assign(36, 1);
    for (int l = 3; l < 36; l += 4) c->layer_rope[l] = 0;
  } else if (name == "mistral-7b") {  // mistralai/Mistral-7B-v0.1 (sliding_window 4096)
    c->family = Family::mistral;
    c->num_layers = 32, c->channels = 4096, c->num_heads = 32, c->num_kv_heads = 8, c->ffn_hidden = 14336;
    c->vocab_size = 32000, c->rope_theta = 10000.f, c->norm_eps = 1e-5f, c->tied_embeddings = false;
    c->sliding_window = 4096, c->layer_sliding.assign(32, 1);
  } else if (name == "gemma3-270m") {  // google/gemma-3-270m
    gemma3_shape(c, 18, 640, 2048);
  } else if (name == "gemma3-1b") {  // google/gemma-3-1b-pt
    gemma3_shape(c, 26, 1152, 6912);
  } else if (name == "qwen3-30b-a3b") {  // Qwen/Qwen3-30B-A3B (issue 39): 128 experts, top 8, every layer MoE
    qwen3_shape(c, 48, 2048, 32, 4, 6144, false);  // intermediate_size 6144: the dense MLP no layer uses
    c->family = Family::qwen3_moe;
    c->num_experts = 128, c->experts_per_tok = 8, c->moe_ffn_hidden = 768, c->norm_topk_prob = true;
    c->router_aux_loss_coef = 0.001f;
  } else if (name == "olmoe-1b-7b") {  // allenai/OLMoE-1B-7B-0924: 64 experts, top 8, clip_qkv null
    c->family = Family::olmoe, c->qk_norm = QkNorm::full_width;
    c->num_layers = 16, c->channels = 2048, c->num_heads = 16, c->num_kv_heads = 16, c->ffn_hidden = 1024;
    c->vocab_size = 50304, c->rope_theta = 10000.f, c->norm_eps = 1e-5f, c->tied_embeddings = false;
    c->num_experts = 64, c->experts_per_tok = 8, c->moe_ffn_hidden = 1024, c->norm_topk_prob = false;
    c->router_aux_loss_coef = 0.01f;
  } else if (name == "mixtral-8x7b") {  // mistralai/Mixtral-8x7B-v0.1: 8 experts, top 2, no sliding window
    c->family = Family::mixtral;
    c->num_layers = 32, c->channels = 4096, c->num_heads = 32, c->num_kv_heads = 8, c->ffn_hidden = 14336;
    c->vocab_size = 32000, c->rope_theta = 1000000.f, c->norm_eps = 1e-5f, c->tied_embeddings = false;
    c->num_experts = 8, c->experts_per_tok = 2, c->moe_ffn_hidden = 14336, c->norm_topk_prob = true;
    c->router_aux_loss_coef = 0.02f;
  } else if (name == "dots.llm1") {  // rednote-hilab/dots.llm1.base: 128 experts, top 6, 2 shared, layer 0 dense
    qwen3_shape(c, 62, 4096, 32, 32, 10944, false);
    c->family = Family::dots1, c->head_dim = 0;  // 4096 / 32 = 128: hidden / heads
    c->vocab_size = 152064, c->rope_theta = 10000000.f, c->norm_eps = 1e-5f;
    c->num_experts = 128, c->experts_per_tok = 6, c->moe_ffn_hidden = 1408, c->norm_topk_prob = true;
    c->n_shared_experts = 2, c->mlp_only_layers = {0};  // first_k_dense_replace 1
    // DeepSeek-V3's router without the selection bias: --moe-bias-update-rate adds it
    // (an HF import always has it: e_score_correction_bias).
    c->moe_sigmoid = true, c->routed_scaling_factor = 2.5f;
  } else if (name == "qwen1.5-moe-a2.7b") {
    // Qwen/Qwen1.5-MoE-A2.7B: Qwen2's attention (q/k/v biases), 60 experts,
    // top 4 unrenormalised, one gated shared expert of 5632 on every layer
    // (transformers' Qwen2MoeConfig defaults, documented as this model's
    // values); rope_theta 1e6, Qwen2MoeConfig's default, which configs of
    // this model quoted in public code agree with (the hub itself was not
    // reachable from here; the parameter counts do not depend on it).
    c->family = Family::qwen2_moe, c->qkv_bias = true;
    c->num_layers = 24, c->channels = 2048, c->num_heads = 16, c->num_kv_heads = 16, c->ffn_hidden = 5632;
    c->vocab_size = 151936, c->rope_theta = 1000000.f, c->norm_eps = 1e-6f, c->tied_embeddings = false;
    c->num_experts = 60, c->experts_per_tok = 4, c->moe_ffn_hidden = 1408, c->norm_topk_prob = false;
    c->shared_expert_ffn = 5632, c->router_aux_loss_coef = 0.001f;
  } else {
    return false;
  }
  return true;
}

static GPTConfig llama_preset(const std::string& name, int vocab_size) {
  GPTConfig c;
  c.arch = Arch::llama;
  if (name == "smollm-135m") {  // HuggingFaceTB/SmolLM-135M config.json
    c.num_layers = 30, c.channels = 576, c.num_heads = 9, c.num_kv_heads = 3;
    c.ffn_hidden = 1536, c.vocab_size = 49152, c.rope_theta = 10000.f;
    return c;
  }
  if (name == "llama3.2-1b") {  // meta-llama/Llama-3.2-1B config.json
    c.num_layers = 16, c.channels = 2048, c.num_heads = 32, c.num_kv_heads = 8;
    c.ffn_hidden = 8192, c.vocab_size = 128256, c.rope_theta = 500000.f;
    c.rope_factor = 32.f, c.rope_low_freq_factor = 1.f, c.rope_high_freq_factor = 4.f;
    c.rope_original_max_pos = 8192;
    return c;
  }
  if (name == "llama3.1-8b") {  // meta-llama/Llama-3.1-8B config.json: 8,030,261,248 parameters
    c.num_layers = 32, c.channels = 4096, c.num_heads = 32, c.num_kv_heads = 8;
    c.ffn_hidden = 14336, c.vocab_size = 128256, c.rope_theta = 500000.f;
    c.rope_factor = 8.f, c.rope_low_freq_factor = 1.f, c.rope_high_freq_factor = 4.f;
    c.rope_original_max_pos = 8192;
    c.tied_embeddings = false;  // a separate lm_head
    return c;
  }
  if (family_preset(name, &c)) return c;
  const int depth = depth_of(name, 'l');
  if (depth < 1 || depth > 96) return GPTConfig{};  // arch gpt2: not a llama preset
  c.num_layers = depth, c.num_heads = depth, c.channels = 64 * depth;
  int kv = std::max(1, depth / 2);
  while (depth % kv != 0) kv--;  // the largest divisor of N that is <= N/2
  c.num_kv_heads = kv;
  c.ffn_hidden = llama_default_ffn(c.channels);
  c.vocab_size = vocab_size;
  return c;
}

GPTConfig preset_config(const std::string& name, int vocab_size, int max_seq_len) {
  GPTConfig c = llama_preset(name, vocab_size);
  if (c.arch == Arch::llama) {
    c.padded_vocab = pad_vocab(c.vocab_size);
    c.max_seq_len = max_seq_len;
    c.finalize();
    return c;
  }
  const int depth = depth_of(name, 'd');
  if (depth < 1 || depth > 96)
    fail("--model '", name, "' is not a preset: use dN (GPT-2) with N layers, e.g. d6, d12 "
         "(GPT-2 124M), d24, d36, d48; lN (Llama-shaped), e.g. l2, l6; ", kNamedModels,
         "; or give --layers/--heads/--channels");
  c.num_layers = depth;
  c.num_heads = depth;
  c.channels = 64 * depth;
  switch (depth) {  // GPT-2's published sizes
    case 24: c.num_heads = 16; c.channels = 1024; break;
    case 36: c.num_heads = 20; c.channels = 1280; break;
    case 48: c.num_heads = 25; c.channels = 1600; break;
    default: break;
  }
  c.vocab_size = vocab_size;
  c.padded_vocab = pad_vocab(vocab_size);
  c.max_seq_len = max_seq_len;
  c.finalize();
  return c;
}

int llama_default_ffn(int channels) {
  return std::max(64, (8 * channels / 3 + 32) / 64 * 64);
}

GPTConfig config_from_flags(const ModelFlags& f) {
  GPTConfig c;
  if (f.model == "custom") {
    if (f.layers <= 0 || f.heads <= 0 || f.channels <= 0)
      fail("--model custom needs --layers, --heads and --channels");
    c.arch = f.arch.empty() ? Arch::gpt2 : parse_arch(f.arch, "--arch");
    c.num_layers = f.layers;
    c.num_heads = f.heads;
    c.channels = f.channels;
    c.vocab_size = f.vocab_size;
    c.max_seq_len = f.max_seq_len;
    if (c.llama()) c.ffn_hidden = llama_default_ffn(c.channels);
  } else {
    c = preset_config(f.model, f.vocab_size, f.max_seq_len);
    if (!f.arch.empty() && parse_arch(f.arch, "--arch") != c.arch)
      fail("--arch ", f.arch, " does not match --model ", f.model, " (a ", arch_name(c.arch),
           " preset): use a ", f.arch == "llama" ? std::string("lN or named (") + kNamedModels + ")" : std::string("dN"),
           " preset, or --model custom --arch ", f.arch);
    // Any value given (not 0) is taken, so that a negative or NaN one is refused
    // by finalize() rather than silently replaced by the preset's.
    if (f.layers != 0) {
      // A named family preset's per-layer lists follow a period (Gemma 3:
      // 5 sliding, 1 full; SmolLM3: every 4th NoPE; Mistral: all sliding):
      // --layers keeps it for the new depth.
      for (auto* v : {&c.layer_sliding, &c.layer_rope})
        if (!v->empty() && f.layers > 0) {
          std::vector<uint8_t> r(f.layers);
          for (int l = 0; l < f.layers; l++) r[l] = (*v)[l % v->size()];
          *v = r;
        }
      c.num_layers = f.layers;
    }
    if (f.heads != 0) c.num_heads = f.heads;
    if (f.channels != 0) {
      c.channels = f.channels;
      if (c.llama()) c.ffn_hidden = llama_default_ffn(c.channels);
    }
  }
  if (!f.family.empty()) {
    const Family fam = parse_family_flag(f.family, "--family");
    if (c.family != Family::llama && c.family != fam)
      fail("--family ", f.family, " does not match --model ", f.model, " (a ", family_name(c.family),
           " preset): drop --family, or use --model custom");
    apply_family_defaults(c, fam, f.sliding_window);
  } else if (f.sliding_window != 0) {
    fail("--sliding-window needs --family mistral or gemma3");
  }
  if (f.num_experts != 0 || f.experts_per_tok != 0 || f.moe_ffn_hidden != 0) {
    if (!c.llama() || !family_is_moe(c.family))
      fail(f.num_experts != 0 ? "--num-experts" : f.experts_per_tok != 0 ? "--experts-per-tok" : "--moe-ffn-hidden",
           " needs a Mixture-of-Experts family: --family qwen3_moe, qwen2_moe, olmoe or mixtral");
    if (f.num_experts != 0) c.num_experts = f.num_experts;
    if (f.experts_per_tok != 0) c.experts_per_tok = f.experts_per_tok;
    if (f.moe_ffn_hidden != 0) c.moe_ffn_hidden = f.moe_ffn_hidden;
  }
  if (!f.moe_scoring.empty() || f.routed_scaling_factor != 0) {
    if (!c.moe())
      fail(!f.moe_scoring.empty() ? "--moe-scoring" : "--routed-scaling-factor",
           " needs a Mixture-of-Experts family: --family qwen3_moe, qwen2_moe, olmoe or mixtral");
    if (!f.moe_scoring.empty()) {
      if (f.moe_scoring != "softmax" && f.moe_scoring != "sigmoid")
        fail("--moe-scoring is '", f.moe_scoring, "'; it must be softmax or sigmoid");
      c.moe_sigmoid = f.moe_scoring == "sigmoid";
    }
    if (f.routed_scaling_factor != 0) c.routed_scaling_factor = f.routed_scaling_factor;
  }
  if (f.n_shared_experts != 0) {
    if (!c.moe())
      fail("--n-shared-experts needs a Mixture-of-Experts family: --family qwen3_moe, qwen2_moe, olmoe, "
           "mixtral or dots1");
    if (f.n_shared_experts < 0)
      fail("--n-shared-experts ", f.n_shared_experts, " must be >= 0");
    c.n_shared_experts = f.n_shared_experts;
  }
  if (f.shared_expert_ffn != 0) {
    if (!c.moe())
      fail("--shared-expert-ffn needs a Mixture-of-Experts family: --family qwen2_moe");
    if (f.shared_expert_ffn < 0)
      fail("--shared-expert-ffn ", f.shared_expert_ffn, " must be >= 0");
    c.shared_expert_ffn = f.shared_expert_ffn;
  }
  if (c.llama() && c.family == Family::qwen2_moe && c.shared_expert_ffn == 0)
    fail("--family qwen2_moe needs --shared-expert-ffn N (the width of its gated shared expert; "
         "Qwen1.5-MoE-A2.7B's is 5632)");
  if (f.moe_n_group != 0 || f.moe_topk_group != 0) {
    if (!c.moe())
      fail(f.moe_n_group != 0 ? "--moe-n-group" : "--moe-topk-group",
           " needs a Mixture-of-Experts family: --family qwen3_moe, qwen2_moe, olmoe or mixtral");
    if (f.moe_n_group != 0) c.n_group = f.moe_n_group;
    if (f.moe_topk_group != 0) c.topk_group = f.moe_topk_group;
  }
  if (c.llama() && family_is_moe(c.family)) {
    if (c.num_experts < 1 || c.experts_per_tok < 1 || c.moe_ffn_hidden < 1)
      fail("--family ", family_name(c.family), " needs --num-experts, --experts-per-tok and "
           "--moe-ffn-hidden (the experts of every MoE layer)");
    if (c.experts_per_tok > c.num_experts)
      fail("--experts-per-tok ", c.experts_per_tok, " exceeds --num-experts ", c.num_experts,
           ": each token goes to that many distinct experts; lower --experts-per-tok or raise --num-experts");
  }
  if (f.head_dim != 0) {
    if (!c.llama()) fail("--head-dim needs --arch llama (GPT-2's head size is channels / heads)");
    c.head_dim = f.head_dim;
  }
  if (f.kv_heads != 0) c.num_kv_heads = f.kv_heads;
  if (f.ffn_hidden != 0) c.ffn_hidden = f.ffn_hidden;
  if (f.untied) c.tied_embeddings = false;
  if (f.rope_theta != 0) c.rope_theta = f.rope_theta;
  if (f.norm_eps != 0) c.norm_eps = f.norm_eps;
  if (!c.llama() && (f.rope_theta != 0 || f.norm_eps != 0))
    fail(f.rope_theta != 0 ? "--rope-theta" : "--norm-eps", " needs --arch llama (GPT-2 has learned positions and LayerNorm "
         "with a fixed epsilon)");
  c.padded_vocab = 0;
  c.finalize();
  return c;
}

std::string first_config_difference(const GPTConfig& a, const GPTConfig& b) {
  if (a.arch != b.arch) return "arch";
  if (a.num_layers != b.num_layers) return "num_layers";
  if (a.num_heads != b.num_heads) return "num_heads";
  if (a.channels != b.channels) return "channels";
  if (a.kv_heads() != b.kv_heads()) return "num_kv_heads";
  // A model whose every layer is MoE has no dense MLP: its ffn_hidden means
  // nothing (Mixtral's intermediate_size is the experts' size, and an export
  // and re-import sets it so).
  const auto all_moe = [](const GPTConfig& c) { return c.moe() && c.moe_layer_count() == c.num_layers; };
  if (a.ffn() != b.ffn() && !(all_moe(a) && all_moe(b))) return "ffn_hidden";
  if (a.vocab_size != b.vocab_size) return "vocab_size";
  if (a.padded_vocab != b.padded_vocab) return "padded_vocab";
  if (a.max_seq_len != b.max_seq_len) return "max_seq_len";
  if (a.tied_embeddings != b.tied_embeddings) return "tied_embeddings";
  if (a.arch == Arch::llama) {  // GPT-2 does not use these
    if (a.norm_eps != b.norm_eps) return "norm_eps";
    if (a.rope_theta != b.rope_theta) return "rope_theta";
    if (a.rope_factor != b.rope_factor) return "rope_factor";
    if (a.rope_factor != 0) {
      if (a.rope_low_freq_factor != b.rope_low_freq_factor) return "rope_low_freq_factor";
      if (a.rope_high_freq_factor != b.rope_high_freq_factor) return "rope_high_freq_factor";
      if (a.rope_original_max_pos != b.rope_original_max_pos) return "rope_original_max_pos";
    }
    if (a.family != b.family) return "family";
    if (a.head_size() != b.head_size()) return "head_dim";
    if (a.qkv_bias != b.qkv_bias) return "qkv_bias";
    if (a.qk_norm != b.qk_norm) return "qk_norm";
    if (a.norm_placement != b.norm_placement) return "norm_placement";
    if (a.norm_unit_offset != b.norm_unit_offset) return "norm_unit_offset";
    if (a.embed_scale != b.embed_scale) return "embed_scale";
    if (a.attn_scale != b.attn_scale) return "attn_scale";
    if (a.mlp_act != b.mlp_act) return "mlp_act";
    if (a.attn_softcap != b.attn_softcap) return "attn_softcap";
    if (a.final_softcap != b.final_softcap) return "final_softcap";
    if (a.sliding_window != b.sliding_window) return "sliding_window";
    for (int l = 0; l < a.num_layers; l++) {
      if (a.layer_is_sliding(l) != b.layer_is_sliding(l)) return "layer_sliding";
      if (a.layer_has_rope(l) != b.layer_has_rope(l)) return "layer_rope";
    }
    if (a.rope_local_theta != b.rope_local_theta) return "rope_local_theta";
    if (a.num_experts != b.num_experts) return "num_experts";
    if (a.num_experts > 0) {
      if (a.experts_per_tok != b.experts_per_tok) return "experts_per_tok";
      if (a.moe_ffn_hidden != b.moe_ffn_hidden) return "moe_ffn_hidden";
      if (a.norm_topk_prob != b.norm_topk_prob) return "norm_topk_prob";
      for (int l = 0; l < a.num_layers; l++)
        if (a.layer_is_moe(l) != b.layer_is_moe(l)) return "mlp_only_layers";
    }
    if (a.clip_qkv != b.clip_qkv) return "clip_qkv";
    if (a.moe_sigmoid != b.moe_sigmoid) return "moe_sigmoid";
    if (a.routed_scaling_factor != b.routed_scaling_factor) return "routed_scaling_factor";
    if (a.n_group != b.n_group) return "n_group";
    if (a.topk_group != b.topk_group) return "topk_group";
    if (a.n_shared_experts != b.n_shared_experts) return "n_shared_experts";
    if (a.shared_expert_ffn != b.shared_expert_ffn) return "shared_expert_ffn";
    // moe_selection_bias is not compared: it is a buffer beside the
    // parameters (GPT::moe_bias), whose presence a resume checks against the
    // checkpoint's /moe_selection_bias dataset by name (checkpoint_restore.cpp).
  }
  return "";
}

}  // namespace ratchet
