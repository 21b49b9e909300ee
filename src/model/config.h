// Model shape: GPT-2 or Llama-family (issue 17).
//
// GPT-2 presets follow llm.c's depth naming: dN has N layers. The four GPT-2
// sizes use GPT-2's own widths: d12 = 124M (768 channels, 12 heads), d24 =
// 350M (1024, 16), d36 = 774M (1280, 20), d48 = 1.5B (1600, 25). Any other
// depth uses 64·N channels and N heads (d6 = 384 channels, 6 heads).
//
// Llama presets: lN has N layers, 64·N channels, N heads of 64, the largest
// divisor of N that is at most max(1, N/2) as KV heads, and a SwiGLU hidden
// size of 8/3·C rounded to a multiple of 64 (l6: 384 channels, 6 heads, 3 KV
// heads, hidden 1024); `smollm-135m`, `llama3.2-1b` and `llama3.1-8b` are
// those models' published shapes (their vocab and RoPE settings included).
//
// Llama differs from GPT-2 in: RMSNorm (norm_eps) instead of LayerNorm, RoPE
// on q and k (rope_*) instead of a position table (max_seq_len then only
// bounds T), a SwiGLU MLP with hidden size ffn(), grouped-query attention
// (kv_heads() KV heads shared by num_heads/kv_heads() query heads each), no
// biases, and optionally untied embeddings (a separate lm_head).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet {

enum class Arch { gpt2, llama };

// The 2026 families (issue 38) are all Arch::llama: the same decoder with a
// few places changed. `family` names the Hugging Face model_type a config
// imports from and exports to; the fields below say what differs, so that
// the model code asks about a feature, never about a family
// (docs/model-families.md has the table of which family sets what).
enum class Family { llama, qwen2, qwen3, olmo2, smollm3, mistral, gemma3, qwen3_moe, olmoe, mixtral, dots1, qwen2_moe };
// q/k RMSNorm after the projection, before RoPE: none; per_head (Qwen3,
// Gemma 3: over head_dim, one [head_dim] weight shared by every head);
// full_width (OLMo 2: over all NH*hs of q and all KV*hs of k).
enum class QkNorm { none, per_head, full_width };
// Where a layer's RMSNorms sit: pre (Llama: before attention and MLP);
// post (OLMo 2: no input norms, a norm on each branch's output before the
// residual add); sandwich (Gemma 3: both).
enum class NormPlacement { pre, post, sandwich };
// The gated MLP's activation: silu (SwiGLU) or gelu_tanh (Gemma's GeGLU,
// gelu_pytorch_tanh).
enum class MlpAct { silu, gelu_tanh };

// The largest sizes a config may have (issue 25: a config.json or a flag with
// 10^9 layers grew until the OOM killer ended the run). Far above any
// published model, small enough that every element and byte count of a step
// fits 64 bits; finalize() refuses anything larger by name before anything
// of that size is allocated.
constexpr int kMaxLayers = 1 << 20;
constexpr int kMaxHeads = 1 << 16;
constexpr int kMaxChannels = 1 << 24;
constexpr int kMaxFfnHidden = 1 << 26;  // 4 x kMaxChannels: GPT-2's 4C
constexpr int kMaxVocab = 1 << 24;
constexpr int kMaxExperts = 1 << 16;
constexpr int kMaxSeqLen = 1 << 24;
constexpr double kMaxParams = 70368744177664.0;  // 2^46 (7.0e13): 40 bytes each fit 2^52

// What the fields are called where a config came from, for messages: the
// flags (--layers), config.json's keys ("num_hidden_layers" in FILE), an
// llm.c header's or a checkpoint's attributes.
struct ConfigFieldNames {
  const char *layers, *heads, *channels, *kv_heads, *ffn_hidden, *vocab_size, *max_seq_len,
      *norm_eps, *rope_theta, *rope_original_max_pos;
};
extern const ConfigFieldNames kFlagNames;        // --layers, --heads, ...
extern const ConfigFieldNames kCheckpointNames;  // num_layers, num_heads, ... (state.h5, llm.c header)
const char* arch_name(Arch a);                 // "gpt2" | "llama"
const char* family_name(Family f);             // HF model_type: "llama", "qwen2", ..., "gemma3_text"
// A model_type -> Family; false when ratchet has no such family.
bool parse_family(const std::string& model_type, Family* f);
Arch parse_arch(const std::string& s, const char* what);  // throws Error naming `what`

struct GPTConfig {
  Arch arch = Arch::gpt2;
  int max_seq_len = 1024;  // maxT: rows of wpe (gpt2); the longest T (llama)
  int vocab_size = 50257;  // V: real tokens
  int padded_vocab = 50304;  // Vp: V rounded up to a multiple of 128 (rows of wte)
  int num_layers = 12;     // L
  int num_heads = 12;      // NH
  int channels = 768;      // C
  int num_kv_heads = 0;        // KV heads (GQA); 0 -> num_heads. Must divide num_heads. gpt2: == num_heads
  int ffn_hidden = 0;          // llama SwiGLU hidden size H (HF intermediate_size); 0 -> gpt2's 4C
  float norm_eps = 1e-5f;      // llama RMSNorm epsilon (HF rms_norm_eps); gpt2 LayerNorm keeps 1e-5
  float rope_theta = 10000.f;  // HF rope_theta
  // Llama 3.1 frequency scaling (HF rope_scaling with rope_type "llama3"); rope_factor 0 = off
  float rope_factor = 0.f, rope_low_freq_factor = 1.f, rope_high_freq_factor = 4.f;
  int rope_original_max_pos = 8192;
  bool tied_embeddings = true; // llama may be untied (separate lm_head); gpt2 always tied

  // ---- the 2026 families (issue 38); defaults are Llama's -------------------
  Family family = Family::llama;
  int head_dim = 0;              // hs; 0 -> C/NH (HF head_dim: Qwen3 and Gemma 3 set their own)
  bool qkv_bias = false;         // Qwen2.5: q/k/v projections have a bias (qkvb), o has none
  QkNorm qk_norm = QkNorm::none;
  NormPlacement norm_placement = NormPlacement::pre;
  bool norm_unit_offset = false; // Gemma: every RMSNorm is x·rstd·(1+w) (weights stored as w)
  bool embed_scale = false;      // Gemma: embeddings times sqrt(C) (rounded to storage dtype)
  float attn_scale = 0.f;        // softmax scale; 0 -> 1/sqrt(hs) (Gemma: query_pre_attn_scalar^-0.5)
  MlpAct mlp_act = MlpAct::silu;
  float attn_softcap = 0.f;      // Gemma attn_logit_softcapping: scores c·tanh(s/c); 0 = off
  float final_softcap = 0.f;     // Gemma final_logit_softcapping on the logits; 0 = off
  int sliding_window = 0;        // W: a sliding layer's query i sees keys i-W < j <= i; 0 = none
  // Per layer, L entries or empty. layer_sliding[l] = 1: layer l attends
  // within sliding_window (empty: no layer does). layer_rope[l] = 0: layer l
  // has no RoPE (SmolLM3's NoPE layers; empty: every layer has RoPE).
  std::vector<uint8_t> layer_sliding, layer_rope;
  float rope_local_theta = 0.f;  // sliding layers' RoPE base (Gemma 3 rope_local_base_freq); 0 -> rope_theta

  // ---- Mixture-of-Experts (issue 39, docs/moe.md); num_experts 0 = dense ---
  // A MoE layer replaces the dense MLP by a router gate (E, C) and E SwiGLU
  // experts of hidden size moe_ffn_hidden; each token goes to its top
  // experts_per_tok experts. Which layers are MoE follows transformers:
  // layer l is MoE iff l is not in mlp_only_layers and (l+1) % decoder_sparse_step == 0.
  int num_experts = 0;           // E (HF num_experts; Mixtral num_local_experts)
  int experts_per_tok = 0;       // k (HF num_experts_per_tok)
  int moe_ffn_hidden = 0;        // I (HF moe_intermediate_size; Mixtral: intermediate_size)
  bool norm_topk_prob = false;   // renormalise the k routing weights (Mixtral: always)
  int decoder_sparse_step = 1;   // HF decoder_sparse_step
  std::vector<int> mlp_only_layers;  // HF mlp_only_layers: layers kept dense
  float router_aux_loss_coef = 0.f;  // HF router_aux_loss_coef: the aux loss's weight in training
  float clip_qkv = 0.f;          // OLMoE clip_qkv: q, k, v clamped to [-c, c]; 0 = off
  // DeepSeek-V3-style routing (transformers' DeepseekV3TopkRouter; the
  // defaults keep the softmax families' math bit for bit):
  bool moe_sigmoid = false;      // HF scoring_func "sigmoid": scores = sigmoid(logits); false: softmax
  float routed_scaling_factor = 1.f;  // HF routed_scaling_factor: the k weights times this
  // HF n_shared_experts (DeepseekV3MoE.shared_experts): every MoE layer also
  // runs one dense SwiGLU MLP of hidden size moe_ffn_hidden·n on every token,
  // its output added to the routed output (layout tensors shw1 / shw2).
  int n_shared_experts = 0;
  // Qwen2-MoE's shared expert (Qwen2MoeSparseMoeBlock.shared_expert, HF
  // shared_expert_intermediate_size): every MoE layer also runs one dense
  // SwiGLU MLP of this width (shw1 / shw2; need not be a multiple of
  // moe_ffn_hidden) on every token, its output scaled per token by
  // sigmoid(x · g) (HF shared_expert_gate, layout tensor shgate) before it is
  // added to the routed output. 0: none. Exclusive with n_shared_experts.
  int shared_expert_ffn = 0;
  // HF e_score_correction_bias (topk_method "noaux_tc"): a per-layer
  // per-expert FP32 buffer (GPT::moe_bias, (L,E)), not a parameter: no
  // gradient, not in AdamW; state.h5's dataset /moe_selection_bias.
  bool moe_selection_bias = false;
  // Its update after each optimizer step (moe::bias_update, aux-loss-free
  // balancing); a training setting (--moe-bias-update-rate), not saved in the model.
  float moe_bias_update_rate = 0.f;
  // HF group-limited selection (DeepseekV3TopkRouter; moe_ops.h): the experts
  // in n_group groups, top k among the topk_group best; 1 / 1: no groups.
  int n_group = 1, topk_group = 1;

  int head_size() const { return head_dim > 0 ? head_dim : channels / num_heads; }
  // What attention writes and o_proj reads: NH·hs (C unless head_dim says otherwise).
  int attn_channels() const { return num_heads * head_size(); }
  bool layer_is_sliding(int l) const { return !layer_sliding.empty() && layer_sliding[l]; }
  bool layer_has_rope(int l) const { return layer_rope.empty() || layer_rope[l]; }
  int window(int l) const { return layer_is_sliding(l) ? sliding_window : 0; }
  // Whether layer l uses the local RoPE table (a sliding layer with its own base).
  bool layer_local_rope(int l) const { return rope_local_theta > 0 && layer_is_sliding(l); }
  float norm_offset() const { return norm_unit_offset ? 1.f : 0.f; }
  bool has_pre_norms() const { return norm_placement != NormPlacement::post; }
  bool has_post_norms() const { return norm_placement != NormPlacement::pre; }
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * channels; }
  bool llama() const { return arch == Arch::llama; }
  // Rows of the fused qkv projection: (NH + 2·KV)·hs (3C for GPT-2).
  int qkv_channels() const { return (num_heads + 2 * kv_heads()) * head_size(); }
  bool moe() const { return num_experts > 0; }
  // Whether layer l's MLP is a MoE layer (transformers' rule, above).
  bool layer_is_moe(int l) const {
    if (num_experts <= 0 || decoder_sparse_step < 1 || (l + 1) % decoder_sparse_step != 0) return false;
    for (int d : mlp_only_layers)
      if (d == l) return false;
    return true;
  }
  int moe_layer_count() const;  // how many layers are MoE
  // The shared experts' hidden size Is (0: none): DeepSeek-V3's
  // n_shared_experts·I, or Qwen2-MoE's gated shared_expert_ffn.
  int shared_ffn() const {
    return num_experts <= 0 ? 0 : n_shared_experts > 0 ? n_shared_experts * moe_ffn_hidden : shared_expert_ffn;
  }
  // Whether the shared expert's output is scaled by sigmoid(x · g) (Qwen2-MoE).
  bool shared_expert_gated() const { return num_experts > 0 && shared_expert_ffn > 0; }
  // Fills padded_vocab from vocab_size and checks the shape (bounds
  // included); throws Error naming the offending field as `names` calls it.
  void finalize(const ConfigFieldNames& names = kFlagNames);
  void check_deepseek_routing() const;  // finalize's part for the DeepSeek-V3 options
  void check_gated_shared_expert() const;  // and for Qwen2-MoE's shared_expert_ffn
  // Parameters of this shape, in floating point (no overflow for any field
  // values): what finalize() bounds before any exact count is made.
  double param_count() const;
  std::string describe() const;
};

// V rounded up to a multiple of 128 (llm.c's padding: tensor-core friendly).
inline int pad_vocab(int v) { return (v + 127) / 128 * 128; }

// "d12", "l6", "smollm-135m", "llama3.2-1b", "llama3.1-8b" -> config. dN and lN take the
// given vocab; the named models keep their own vocab (a model's vocab may
// exceed the data's). Throws Error on an unknown name.
GPTConfig preset_config(const std::string& name, int vocab_size, int max_seq_len);

// The model flags `ratchet train` and `ratchet plan` share (0 / "" = unset).
struct ModelFlags {
  std::string model;         // preset name, or "custom"
  std::string arch;          // "" (the preset's; gpt2 for custom), "gpt2", "llama"
  int layers = 0, heads = 0, channels = 0;
  int kv_heads = 0, ffn_hidden = 0;  // llama only
  bool untied = false;               // llama only: a separate lm_head
  float rope_theta = 0, norm_eps = 0;  // llama only; 0: the preset's
  int vocab_size = 0, max_seq_len = 0;
  std::string family;                // "" (the preset's), or a family's options on this shape
  int head_dim = 0;                  // llama only; 0: the preset's (or channels / heads)
  int sliding_window = 0;            // --family mistral / gemma3: the window (0: none)
  // --family qwen3_moe / olmoe / mixtral: E, k and I of every MoE layer (0: the preset's)
  int num_experts = 0, experts_per_tok = 0, moe_ffn_hidden = 0;
  // --moe-scoring softmax|sigmoid and --routed-scaling-factor ("" / 0: the model's)
  std::string moe_scoring;
  float routed_scaling_factor = 0;
  int n_shared_experts = 0;  // --n-shared-experts (0: the model's)
  int shared_expert_ffn = 0;  // --shared-expert-ffn: Qwen2-MoE's gated shared expert (0: the model's)
  // --moe-n-group and --moe-topk-group (0: the model's)
  int moe_n_group = 0, moe_topk_group = 0;
};
// The finalized config the flags describe; throws Error naming the flag.
GPTConfig config_from_flags(const ModelFlags& f);
// Llama's SwiGLU hidden size for C channels when none is given: 8/3·C to the
// nearest multiple of 64 (at least 64).
int llama_default_ffn(int channels);

// The first field (by its checkpoint name, e.g. "num_kv_heads") in which a
// and b differ, or "" when they describe the same model.
std::string first_config_difference(const GPTConfig& a, const GPTConfig& b);

}  // namespace ratchet
