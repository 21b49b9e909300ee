// config.json <-> GPTConfig for every family ratchet imports (issue 38):
// llama, qwen2, qwen3, olmo2, smollm3, mistral, gemma3_text, and issue 39's
// MoE families qwen3_moe, olmoe, mixtral, dots1 (rednote's dots.llm1:
// Qwen3 attention, DeepSeek-V3's MoE with shared experts) and qwen2_moe
// (Qwen2's attention, a sigmoid-gated shared expert). Field names,
// meanings and the defaults of absent fields follow transformers'
// configuration_<family>.py; the tensor names are in hf_checkpoint.cpp.
//
// A field that changes the math and that ratchet does not implement is
// refused by name and value (rope_scaling "yarn", clip_qkv outside OLMoE, an
// attention bias on o_proj, another activation, router_jitter_noise, a
// gated shared expert outside qwen2_moe), never ignored: an ignored field would train a different
// model than the one the user named.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "interop/hf_checkpoint.h"

namespace ratchet {

namespace {

// transformers' value for a field config.json leaves out, per family
// (configuration_<family>.py at the version of the issue).
struct FamilyDefaults {
  Family family;
  const char* architecture;  // what `architectures` names (AutoModelForCausalLM's class)
  int kv_heads;              // num_key_value_heads; 0: num_attention_heads
  int head_dim;              // 0: hidden_size / num_attention_heads
  int max_pos;               // max_position_embeddings
  double norm_eps, rope_theta;
  bool tied;                 // tie_word_embeddings
};
constexpr FamilyDefaults kFamilies[] = {
    {Family::llama, "LlamaForCausalLM", 0, 0, 2048, 1e-6, 10000.0, false},
    {Family::qwen2, "Qwen2ForCausalLM", 32, 0, 32768, 1e-6, 10000.0, false},
    {Family::qwen3, "Qwen3ForCausalLM", 32, 128, 32768, 1e-6, 10000.0, false},
    {Family::olmo2, "Olmo2ForCausalLM", 0, 0, 2048, 1e-5, 10000.0, false},
    {Family::smollm3, "SmolLM3ForCausalLM", 4, 0, 32768, 1e-6, 2000000.0, true},
    {Family::mistral, "MistralForCausalLM", 8, 0, 131072, 1e-6, 10000.0, false},
    {Family::gemma3, "Gemma3ForCausalLM", 4, 256, 131072, 1e-6, 1000000.0, true},
    // Issue 39's MoE families. Qwen3MoeConfig has no head_dim of its own
    // (attention takes hidden / heads where config.json gives none).
    {Family::qwen3_moe, "Qwen3MoeForCausalLM", 4, 0, 32768, 1e-6, 10000.0, false},
    {Family::olmoe, "OlmoeForCausalLM", 0, 0, 4096, 1e-5, 10000.0, false},
    {Family::mixtral, "MixtralForCausalLM", 8, 0, 131072, 1e-5, 1000000.0, false},
    // Dots1Config: num_key_value_heads 32, no head_dim (Qwen3's attention
    // takes hidden / heads), max_position_embeddings 2048.
    {Family::dots1, "Dots1ForCausalLM", 32, 0, 2048, 1e-6, 10000.0, false},
    // Qwen2MoeConfig: num_key_value_heads 16, no head_dim (hidden / heads).
    {Family::qwen2_moe, "Qwen2MoeForCausalLM", 16, 0, 32768, 1e-6, 10000.0, false},
};
// transformers' MoE defaults where config.json leaves a field out.
struct MoeDefaults {
  Family family;
  int experts, per_tok, moe_ffn;  // moe_ffn 0: intermediate_size is the experts' size (required)
  bool norm_topk_prob;
  double aux_coef;                // router_aux_loss_coef
};
constexpr MoeDefaults kMoeFamilies[] = {
    {Family::qwen3_moe, 128, 8, 768, false, 0.001},
    {Family::olmoe, 64, 8, 0, false, 0.01},
    {Family::mixtral, 8, 2, 0, true, 0.001},
    // Dots1Config: n_routed_experts and num_experts_per_tok have no default
    // (None; read as required); no aux loss (Dots1ForCausalLM has none).
    {Family::dots1, 0, 0, 1408, false, 0.0},
    // Qwen2MoeConfig: Qwen1.5-MoE-A2.7B's values; norm_topk_prob off.
    {Family::qwen2_moe, 60, 4, 1408, false, 0.001},
};
const MoeDefaults* moe_defaults_of(Family f) {
  for (const auto& d : kMoeFamilies)
    if (d.family == f) return &d;
  return nullptr;
}
const FamilyDefaults& defaults_of(Family f) {
  for (const auto& d : kFamilies)
    if (d.family == f) return d;
  return kFamilies[0];
}

// JSON integers come as signed or unsigned (nlohmann keeps the sign it
// parsed): compared without converting one into the other.
bool positive_integer(const nlohmann::json& v) {
  if (!v.is_number_integer()) return false;
  return v.is_number_unsigned() ? v.get<uint64_t>() > 0 : v.get<int64_t>() > 0;
}
// Also a whole number too large for 64 bits, which the parser keeps as a
// double (1e20): too large, not "not an integer".
bool above(const nlohmann::json& v, int64_t most) {
  if (!v.is_number()) return false;
  if (v.is_number_float()) return v.get<double>() > (double)most && std::floor(v.get<double>()) == v.get<double>();
  return v.is_number_unsigned() ? v.get<uint64_t>() > (uint64_t)most : v.get<int64_t>() > most;
}

// The shortest decimal that reads back as `f` (as a float), as a double: 1e-05
// for the float nearest 1e-5, where the float's exact double value would be
// written as 9.999999747378752e-06 (what Python's float32 repr also avoids).
double shortest_decimal(float f) {
  char buf[32];
  for (int digits = 1; digits <= 9; digits++) {  // 9 significant digits always round-trip
    std::snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

// Gemma's attention scale from query_pre_attn_scalar, as transformers
// computes it (query_pre_attn_scalar ** -0.5 in double), rounded to float.
float scale_of_scalar(double q) { return (float)(1.0 / std::sqrt(q)); }
// The scalar written for a scale: the shortest decimal whose scale is the
// same float (256 for 0.0625), so that an export imports to the same model.
double scalar_of_scale(float s) {
  const double exact = 1.0 / ((double)s * (double)s);
  char buf[40];
  for (int digits = 1; digits <= 17; digits++) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, exact);
    if (scale_of_scalar(std::strtod(buf, nullptr)) == s) return std::strtod(buf, nullptr);
  }
  return exact;
}

// Reads one config.json with the messages naming it.
class Reader {
 public:
  Reader(const nlohmann::json& j, const std::string& path) : j_(j), path_(path) {}
  bool has(const char* k) const { return j_.contains(k) && !j_[k].is_null(); }
  const nlohmann::json& operator[](const char* k) const { return j_[k]; }

  // A size: a positive integer no larger than ratchet's bound for it
  // (model/config.h), said as such (issue 25: 10^9 layers was "must be a
  // positive integer", and a config within int range grew to 24 GB).
  int integer(const char* k, int fallback, bool required, int64_t most) const {
    if (!has(k)) {
      if (required) fail(path_, " has no \"", k, "\", which ratchet needs (every Hugging Face config.json has it)");
      return fallback;
    }
    return integer_value(j_[k], k, most);
  }
  int integer_value(const nlohmann::json& v, const std::string& what, int64_t most) const {
    if (above(v, most))
      fail(path_, ": \"", what, "\" is ", v.dump(), ", more than ratchet accepts (at most ", most,
           "; larger than any model ratchet can hold)");
    if (!positive_integer(v)) fail(path_, ": \"", what, "\" must be a positive integer (got ", v.dump(), ")");
    return v.get<int>();
  }
  double number(const nlohmann::json& o, const char* k, double fallback, const std::string& where = "") const {
    if (!o.contains(k) || o[k].is_null()) return fallback;
    if (!o[k].is_number() || !(o[k].get<double>() > 0) || !std::isfinite(o[k].get<double>()))
      fail(path_, ": ", where, "\"", k, "\" must be a positive number (got ", o[k].dump(), ")");
    return o[k].get<double>();
  }
  double number(const char* k, double fallback) const { return number(j_, k, fallback); }
  bool boolean(const char* k, bool fallback) const {
    if (!has(k)) return fallback;
    if (!j_[k].is_boolean()) fail(path_, ": \"", k, "\" must be true or false (got ", j_[k].dump(), ")");
    return j_[k].get<bool>();
  }
  // A field that must keep transformers' default for ratchet's model to be
  // the one config.json describes.
  void must_be(const char* k, const nlohmann::json& want, const char* why) const {
    if (has(k) && j_[k] != want)
      fail(path_, ": \"", k, "\" is ", j_[k].dump(), ", which ratchet does not implement (it needs ", want.dump(),
           ": ", why, ")");
  }
  // sliding_window: a positive number of keys, or null/absent (fallback).
  int window(int fallback) const {
    if (!j_.contains("sliding_window")) return fallback;
    const auto& v = j_["sliding_window"];
    if (v.is_null()) return 0;
    if (v.is_number() && !(v.get<double>() > 0))
      fail(path_, ": \"sliding_window\" is ", v.dump(), ": a window must be at least 1 token (or null for none)");
    return integer_value(v, "sliding_window", kMaxSeqLen);
  }
  // layer_types: L entries of "full_attention" | "sliding_attention"; false when absent.
  bool layer_types(int L, std::vector<uint8_t>* sliding) const {
    if (!has("layer_types")) return false;
    const auto& v = j_["layer_types"];
    if (!v.is_array()) fail(path_, ": \"layer_types\" must be a list of \"full_attention\" / \"sliding_attention\"");
    if (v.size() != (size_t)L)
      fail(path_, ": \"layer_types\" has ", v.size(), " entries but num_hidden_layers is ", L, ": give one per layer");
    sliding->assign(L, 0);
    for (int l = 0; l < L; l++) {
      if (v[l] == "sliding_attention") (*sliding)[l] = 1;
      else if (v[l] != "full_attention")
        fail(path_, ": \"layer_types\"[", l, "] is ", v[l].dump(), ": ratchet knows \"full_attention\" and "
             "\"sliding_attention\"");
    }
    return true;
  }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& j_;
  const std::string& path_;
};

// One RoPE dictionary (rope_scaling, rope_parameters or one of Gemma 3's
// per-layer-type entries): its theta into *theta when it has one, its
// scaling into c (Llama 3.1's "llama3" on llama only; refused otherwise).
void read_rope_dict(const Reader& r, const nlohmann::json& d, const std::string& where, double* theta,
                    GPTConfig* c, bool scaling_allowed) {
  if (!d.is_object()) fail(r.path(), ": \"", where, "\" must be an object (got ", d.dump(), ")");
  const std::string ctx = where + " ";
  *theta = r.number(d, "rope_theta", *theta, ctx);
  const nlohmann::json type = d.contains("rope_type") ? d["rope_type"] : d.contains("type") ? d["type"] : "default";
  if (type == "default") return;
  if (type != "llama3" || !scaling_allowed)
    fail(r.path(), ": ", where, " rope_type ", type.dump(), " is not supported: ratchet implements plain RoPE",
         c->family == Family::llama ? " and Llama 3.1's \"llama3\" scaling" : "",
         " (for a ", family_name(c->family), " model)");
  c->rope_factor = (float)r.number(d, "factor", 0, ctx);
  if (c->rope_factor == 0) fail(r.path(), ": ", where, " has no \"factor\"");
  c->rope_low_freq_factor = (float)r.number(d, "low_freq_factor", 1.0, ctx);
  c->rope_high_freq_factor = (float)r.number(d, "high_freq_factor", 4.0, ctx);
  if (d.contains("original_max_position_embeddings"))
    c->rope_original_max_pos = r.integer_value(d["original_max_position_embeddings"],
                                               where + " original_max_position_embeddings", kMaxSeqLen);
}

// The MoE fields (issue 39) of a qwen3_moe, qwen2_moe, olmoe or mixtral config.json,
// after the shape's: transformers' meaning and defaults for each; a field
// that changes the math and that ratchet does not implement is refused.
void read_dots1_moe(const Reader& r, const MoeDefaults& md, GPTConfig* c);

void read_moe(const Reader& r, const MoeDefaults& md, GPTConfig* c) {
  const Family f = c->family;
  const std::string& path = r.path();
  if (f == Family::dots1) return read_dots1_moe(r, md, c);
  // The expert count: num_experts (Qwen3-MoE, OLMoE) or num_local_experts
  // (Mixtral); each config class maps the other spelling onto its own.
  const char* key = f == Family::mixtral ? "num_local_experts" : "num_experts";
  const char* alias = f == Family::mixtral ? "num_experts" : "num_local_experts";
  c->num_experts = r.integer(key, r.has(alias) ? r.integer(alias, 0, false, kMaxExperts) : md.experts, false, kMaxExperts);
  if (r.has(key) && r.has(alias) && r[key] != r[alias])
    fail(path, ": \"", key, "\" is ", r[key].dump(), " but \"", alias, "\" is ", r[alias].dump(),
         ": they name the same expert count; give one");
  c->experts_per_tok = r.integer("num_experts_per_tok", md.per_tok, false, kMaxExperts);
  // Qwen3-MoE's experts have their own size; OLMoE's and Mixtral's are intermediate_size.
  c->moe_ffn_hidden = md.moe_ffn > 0 ? r.integer("moe_intermediate_size", md.moe_ffn, false, kMaxFfnHidden)
                                     : c->ffn_hidden;
  // Mixtral always renormalises the top-k weights (MixtralConfig has no norm_topk_prob).
  c->norm_topk_prob = f == Family::mixtral ? true : r.boolean("norm_topk_prob", md.norm_topk_prob);
  double coef = md.aux_coef;
  if (r.has("router_aux_loss_coef")) {
    const auto& v = r["router_aux_loss_coef"];
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
      fail(path, ": \"router_aux_loss_coef\" must be a number >= 0 (got ", v.dump(), ")");
    coef = v.get<double>();
  }
  c->router_aux_loss_coef = (float)coef;
  // Which layers are MoE: Qwen3-MoE's and Qwen2-MoE's decoder_sparse_step and
  // mlp_only_layers (OLMoE and Mixtral have experts on every layer and no such fields).
  if (f == Family::qwen3_moe || f == Family::qwen2_moe) {
    c->decoder_sparse_step = r.integer("decoder_sparse_step", 1, false, kMaxLayers);
    c->mlp_only_layers.clear();
    if (r.has("mlp_only_layers")) {
      const auto& v = r["mlp_only_layers"];
      if (!v.is_array()) fail(path, ": \"mlp_only_layers\" must be a list of layer indices (got ", v.dump(), ")");
      for (size_t i = 0; i < v.size(); i++) {
        const bool ok = v[i].is_number_integer() && v[i].get<int64_t>() >= 0 && v[i].get<int64_t>() < c->num_layers;
        if (!ok)
          fail(path, ": \"mlp_only_layers\"[", i, "] is ", v[i].dump(), ": a layer index from 0 to ",
               c->num_layers - 1, " (num_hidden_layers ", c->num_layers, ")");
        c->mlp_only_layers.push_back(v[i].get<int>());
      }
    }
    // Qwen2-MoE's shared expert (Qwen2MoeSparseMoeBlock builds it on every
    // MoE layer, gated by sigmoid(shared_expert_gate(x))): its width.
    if (f == Family::qwen2_moe)
      c->shared_expert_ffn = r.integer("shared_expert_intermediate_size", 5632, false, kMaxFfnHidden);
  } else {
    c->ffn_hidden = c->moe_ffn_hidden;  // no dense MLP; kept equal so that an export reads back the same
  }
  // Mixtral's router jitter multiplies the MoE input by noise in training.
  if (r.has("router_jitter_noise") &&
      !(r["router_jitter_noise"].is_number() && r["router_jitter_noise"].get<double>() == 0))
    fail(path, ": \"router_jitter_noise\" is ", r["router_jitter_noise"].dump(),
         ", which ratchet does not implement (it needs 0: no noise on the router's input)");
  // OLMoE's clip_qkv clamps q, k and v to [-c, c] after the q/k norms.
  if (f == Family::olmoe && r.has("clip_qkv")) {
    const auto& v = r["clip_qkv"];
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      fail(path, ": \"clip_qkv\" must be a positive number, or null for none (got ", v.dump(), ")");
    c->clip_qkv = (float)v.get<double>();
  }
}

// A count that may be 0: a non-negative integer (bounded), or `fallback` when absent.
int count_field(const Reader& r, const char* k, int fallback, bool required, int64_t most) {
  if (!r.has(k)) {
    if (required) fail(r.path(), " has no \"", k, "\", which ratchet needs (transformers has no default for it)");
    return fallback;
  }
  if (r[k] == 0) return 0;
  return r.integer_value(r[k], k, most);
}

// dots1 (Dots1Config; DeepseekV3TopkRouter / DeepseekV3MoE): sigmoid scores
// chosen on scores + e_score_correction_bias (always there: the selection
// bias, its values in the safetensors), renormalised by sum + 1e-20 with
// norm_topk_prob, times routed_scaling_factor; n_shared_experts shared
// experts of moe_intermediate_size each; layers below first_k_dense_replace
// dense (intermediate_size), the rest MoE; group-limited selection n_group /
// topk_group (null or absent: 1, no groups; the published configs have null).
void read_dots1_moe(const Reader& r, const MoeDefaults& md, GPTConfig* c) {
  const std::string& path = r.path();
  c->num_experts = r.integer("n_routed_experts", 0, true, kMaxExperts);
  if (r.has("num_local_experts") && r["num_local_experts"] != r["n_routed_experts"])
    fail(path, ": \"n_routed_experts\" is ", r["n_routed_experts"].dump(), " but \"num_local_experts\" is ",
         r["num_local_experts"].dump(), ": they name the same expert count; give one");
  c->experts_per_tok = r.integer("num_experts_per_tok", 0, true, kMaxExperts);
  c->moe_ffn_hidden = r.integer("moe_intermediate_size", md.moe_ffn, false, kMaxFfnHidden);
  c->norm_topk_prob = r.boolean("norm_topk_prob", md.norm_topk_prob);
  c->n_shared_experts = count_field(r, "n_shared_experts", 0, true, kMaxExperts);
  c->n_group = r.integer("n_group", 1, false, kMaxExperts);  // finalize() checks them together
  c->topk_group = r.integer("topk_group", 1, false, kMaxExperts);
  c->routed_scaling_factor = (float)r.number("routed_scaling_factor", 1.0);
  const int k = count_field(r, "first_k_dense_replace", 0, false, kMaxLayers);
  if (k > c->num_layers)
    fail(path, ": \"first_k_dense_replace\" is ", k, " but num_hidden_layers is ", c->num_layers,
         ": at most every layer is dense");
  c->decoder_sparse_step = 1;
  c->mlp_only_layers.clear();
  for (int l = 0; l < k; l++) c->mlp_only_layers.push_back(l);
  c->moe_sigmoid = true;
  c->moe_selection_bias = true;
  c->router_aux_loss_coef = 0.f;
  if (k == c->num_layers)
    fail(path, ": \"first_k_dense_replace\" is ", k, " = num_hidden_layers: no layer has experts; "
         "import it as a dense model instead");
}

// Whether c's MoE layers are the layers from some k on (dots1's
// first_k_dense_replace); k, the first MoE layer, into *k.
bool first_k_dense(const GPTConfig& c, int* k) {
  int first = c.num_layers;
  for (int l = 0; l < c.num_layers; l++)
    if (c.layer_is_moe(l)) {
      first = l;
      break;
    }
  for (int l = first; l < c.num_layers; l++)
    if (!c.layer_is_moe(l)) return false;
  *k = first;
  return true;
}

// The supported model_types, for the message on any other.
std::string supported_model_types() {
  std::string s;
  for (const auto& d : kFamilies) s += std::string(s.empty() ? "" : ", ") + "\"" + family_name(d.family) + "\"";
  return s;
}

}  // namespace

const char* hf_architecture(Family f) { return defaults_of(f).architecture; }

std::string hf_family_mismatch(const GPTConfig& c) {
  const Family f = c.family;
  const bool gemma = f == Family::gemma3;
  if (c.qkv_bias != (f == Family::qwen2 || f == Family::qwen2_moe)) return "qkv_bias";
  const QkNorm qk = f == Family::qwen3 || f == Family::qwen3_moe || f == Family::dots1 || gemma
                        ? QkNorm::per_head
                    : f == Family::olmo2 || f == Family::olmoe                ? QkNorm::full_width
                                                                              : QkNorm::none;
  if (c.qk_norm != qk) return "qk_norm";
  const NormPlacement np = f == Family::olmo2 ? NormPlacement::post : gemma ? NormPlacement::sandwich
                                                                             : NormPlacement::pre;
  if (c.norm_placement != np) return "norm_placement";
  if (c.norm_unit_offset != gemma) return "norm_unit_offset";
  if (c.embed_scale != gemma) return "embed_scale";
  if ((c.mlp_act == MlpAct::gelu_tanh) != gemma) return "mlp_act";
  if (!gemma) {
    if (c.attn_scale != 0) return "attn_scale";
    if (c.attn_softcap != 0) return "attn_softcap";
    if (c.final_softcap != 0) return "final_softcap";
    if (c.rope_local_theta != 0) return "rope_local_theta";
  }
  if (f != Family::smollm3)
    for (int l = 0; l < c.num_layers; l++)
      if (!c.layer_has_rope(l)) return "layer_rope";
  bool any = false, all = true;
  for (int l = 0; l < c.num_layers; l++) any |= c.window(l) > 0, all &= c.window(l) > 0;
  if (any && (f == Family::llama || f == Family::olmo2)) return "layer_sliding";
  if ((f == Family::mistral || f == Family::mixtral) && any && !all) return "layer_sliding";
  if (any && f == Family::olmoe) return "layer_sliding";
  if (c.rope_factor != 0 && f != Family::llama) return "rope_factor";
  // MoE (issue 39): the three MoE families have experts, no other family
  // does; OLMoE and Mixtral have them on every layer, Mixtral always
  // renormalises its top-k weights, only OLMoE clips q/k/v, and OLMoE's
  // full-width q norm is over hidden_size (so head_dim is hidden / heads).
  const bool moe_family = moe_defaults_of(f) != nullptr;
  if ((c.num_experts > 0) != moe_family) return "num_experts";
  if ((f == Family::olmoe || f == Family::mixtral) && c.moe_layer_count() != c.num_layers)
    return "mlp_only_layers";
  if (f == Family::mixtral && !c.norm_topk_prob) return "norm_topk_prob";
  if (c.clip_qkv != 0 && f != Family::olmoe) return "clip_qkv";
  if (f == Family::olmoe && c.head_dim != 0) return "head_dim";
  if ((f == Family::qwen3_moe || f == Family::qwen2_moe) && any) return "layer_sliding";
  // Qwen2-MoE always has its gated shared expert; no other family has one.
  if ((f == Family::qwen2_moe) != c.shared_expert_gated()) return "shared_expert_ffn";
  if (f == Family::dots1) {
    // DeepSeek-V3's router: always sigmoid scores (the selection bias is
    // exported as zeros where the model has none); layers dense below
    // first_k_dense_replace, MoE from there on.
    int k = 0;
    if (!c.moe_sigmoid) return "scoring_func";
    if (!first_k_dense(c, &k)) return "mlp_only_layers";
    return "";
  }
  // DeepSeek-V3's router options: none of these families has them, and
  // transformers would route their model with softmax, unscaled, unbiased,
  // without shared experts.
  if (c.moe_sigmoid) return "scoring_func";
  if (c.routed_scaling_factor != 1.f) return "routed_scaling_factor";
  if (c.moe_selection_bias) return "moe_selection_bias";
  if (c.n_shared_experts != 0) return "n_shared_experts";
  if (c.n_group != 1 || c.topk_group != 1) return "n_group";
  return "";
}

// ---- config.json -> GPTConfig ----------------------------------------------------

GPTConfig hf_config_from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) fail(path, " is not a JSON object");
  const Reader r(j, path);
  if (!r.has("model_type"))
    fail(path, " has no \"model_type\": ratchet imports ", supported_model_types());
  GPTConfig c;
  c.arch = Arch::llama;
  if (!j["model_type"].is_string() || !parse_family(j["model_type"].get<std::string>(), &c.family))
    fail(path, ": model_type is ", j["model_type"].dump(), ", which ratchet does not import; it imports ",
         supported_model_types(),
         j["model_type"] == "gemma3" ? " (\"gemma3\" is the multimodal Gemma3ForConditionalGeneration: ratchet "
                                       "trains the text model, \"gemma3_text\" / Gemma3ForCausalLM)"
                                     : "");
  const Family f = c.family;
  const bool gemma = f == Family::gemma3;
  const FamilyDefaults& d = defaults_of(f);

  // The fields ratchet does not implement, refused by name.
  if (gemma) {
    r.must_be("hidden_activation", "gelu_pytorch_tanh", "Gemma 3's gated gelu_pytorch_tanh MLP");
    r.must_be("use_bidirectional_attention", false, "causal attention");
  } else {
    r.must_be("hidden_act", "silu", "the SwiGLU MLP");
  }
  if (f != Family::qwen2 && f != Family::qwen2_moe)  // no such field: q/k/v have biases, o_proj none
    r.must_be("attention_bias", false, "no attention biases in this family");
  r.must_be("mlp_bias", false, "no MLP biases");
  if (f != Family::olmoe) r.must_be("clip_qkv", nullptr, "unclipped q/k/v");
  // Qwen2-MoE's gated shared expert belongs to qwen2_moe; another family's
  // transformers class would build no such expert.
  if (f != Family::qwen2_moe && r.has("shared_expert_intermediate_size") && j["shared_expert_intermediate_size"] != 0)
    fail(path, ": \"shared_expert_intermediate_size\" is ", j["shared_expert_intermediate_size"].dump(),
         ", but a ", family_name(f), " model has no gated shared expert (it needs 0 or none; the "
         "model_type with one is \"qwen2_moe\")");
  // Qwen2MoeConfig.qkv_bias: q/k/v biases on (every published Qwen2-MoE; older
  // transformers have no such field and always add them).
  if (f == Family::qwen2_moe) r.must_be("qkv_bias", true, "Qwen2-MoE's q/k/v biases");

  c.channels = r.integer("hidden_size", 0, true, kMaxChannels);
  c.ffn_hidden = r.integer("intermediate_size", 0, true, kMaxFfnHidden);
  c.num_layers = r.integer("num_hidden_layers", 0, true, kMaxLayers);
  c.num_heads = r.integer("num_attention_heads", 0, true, kMaxHeads);
  c.num_kv_heads = r.integer("num_key_value_heads", d.kv_heads > 0 ? d.kv_heads : c.num_heads, false, kMaxHeads);
  c.vocab_size = r.integer("vocab_size", 0, true, kMaxVocab);
  c.max_seq_len = r.integer("max_position_embeddings", d.max_pos, false, kMaxSeqLen);
  const int hd = r.integer("head_dim", d.head_dim, false, kMaxChannels);
  if (hd == 0 && c.channels % c.num_heads != 0)
    fail(path, ": hidden_size ", c.channels, " is not a multiple of num_attention_heads ", c.num_heads,
         " and there is no head_dim: give head_dim");
  // head_dim equal to hidden/heads is the default (0), as a Llama without the field.
  c.head_dim = hd > 0 && !(c.channels % c.num_heads == 0 && hd == c.channels / c.num_heads) ? hd : 0;
  if (c.head_size() % 2 != 0)
    fail(path, ": head_dim ", c.head_size(), hd > 0 ? "" : " (hidden_size / num_attention_heads)",
         " is odd: RoPE rotates pairs of a head's channels, so it must be even");
  if (f == Family::olmoe && c.head_dim != 0)
    fail(path, ": \"head_dim\" is ", hd, " but an olmoe model's heads are hidden_size / num_attention_heads = ",
         c.channels / c.num_heads, " wide (its q_norm is over hidden_size): drop head_dim");
  if (const MoeDefaults* md = moe_defaults_of(f)) read_moe(r, *md, &c);
  c.norm_eps = (float)r.number("rms_norm_eps", d.norm_eps);
  c.tied_embeddings = r.boolean("tie_word_embeddings", d.tied);

  // RoPE: rope_theta / rope_scaling, or the newer rope_parameters (one
  // dictionary, or Gemma 3's per layer type); rope_parameters wins where both
  // are given, as in transformers' conversion of the old spelling.
  double theta = r.number("rope_theta", d.rope_theta);
  double local = gemma ? r.number("rope_local_base_freq", 10000.0) : 0;
  const bool scaling_allowed = f == Family::llama;
  if (r.has("rope_scaling")) read_rope_dict(r, j["rope_scaling"], "rope_scaling", &theta, &c, scaling_allowed);
  if (r.has("rope_parameters")) {
    const auto& rp = j["rope_parameters"];
    if (gemma && rp.is_object() && (rp.contains("full_attention") || rp.contains("sliding_attention"))) {
      for (const auto& [k, v] : rp.items())
        if (k != "full_attention" && k != "sliding_attention")
          fail(path, ": rope_parameters has \"", k, "\"; Gemma 3's has \"full_attention\" and \"sliding_attention\"");
      if (rp.contains("full_attention"))
        read_rope_dict(r, rp["full_attention"], "rope_parameters.full_attention", &theta, &c, false);
      if (rp.contains("sliding_attention"))
        read_rope_dict(r, rp["sliding_attention"], "rope_parameters.sliding_attention", &local, &c, false);
    } else {
      read_rope_dict(r, rp, "rope_parameters", &theta, &c, scaling_allowed);
    }
  }
  c.rope_theta = (float)theta;

  // Per-layer attention and RoPE.
  const int L = c.num_layers;
  std::vector<uint8_t> types;
  switch (f) {
    case Family::llama:
    case Family::olmo2:
      break;
    case Family::qwen2:
    case Family::qwen3:
    case Family::smollm3: {
      // transformers: sliding_window counts only with use_sliding_window; the
      // sliding layers are layer_types', else (Qwen) those from
      // max_window_layers on, else (SmolLM3) the NoPE layers.
      const bool use = r.boolean("use_sliding_window", false);
      const int W = r.window(f == Family::smollm3 ? 0 : 4096);
      if (f == Family::smollm3) {
        std::vector<uint8_t> rope(L, 1);
        if (r.has("no_rope_layers")) {
          const auto& v = j["no_rope_layers"];
          if (!v.is_array() || v.size() != (size_t)L)
            fail(path, ": \"no_rope_layers\" must be a list of ", L, " entries (num_hidden_layers), 1 for a RoPE "
                 "layer and 0 for a NoPE one (got ", v.is_array() ? std::to_string(v.size()) + " entries" : v.dump(), ")");
          for (int l = 0; l < L; l++) {
            if (v[l] != 0 && v[l] != 1)
              fail(path, ": \"no_rope_layers\"[", l, "] is ", v[l].dump(), ": 1 for RoPE, 0 for NoPE");
            rope[l] = v[l] == 1;
          }
        } else {
          const int every = r.integer("no_rope_layer_interval", 4, false, kMaxLayers);
          for (int l = 0; l < L; l++) rope[l] = (l + 1) % every != 0;
        }
        bool nope = false;
        for (auto x : rope) nope |= !x;
        if (nope) c.layer_rope = rope;
        if (!r.layer_types(L, &types)) {
          types.assign(L, 0);
          for (int l = 0; l < L; l++) types[l] = !rope[l];
        }
      } else if (!r.layer_types(L, &types)) {
        // max_window_layers 0 (every layer slides) is allowed.
        const bool zero = r.has("max_window_layers") && j["max_window_layers"] == 0;
        const int from = zero ? 0
                         : r.has("max_window_layers")
                             ? r.integer_value(j["max_window_layers"], "max_window_layers", kMaxLayers)
                             : 28;  // Qwen2Config / Qwen3Config's default
        types.assign(L, 0);
        for (int l = from; l < L; l++) types[l] = 1;
      }
      if (!use || W == 0) types.clear();
      if (!types.empty()) c.sliding_window = W;
      break;
    }
    case Family::mistral:
    case Family::mixtral: {
      // Every layer slides (MistralAttention takes config.sliding_window on
      // each); MixtralConfig's default is null (none), Mistral's 4096.
      const int W = r.window(f == Family::mixtral ? 0 : 4096);
      if (W > 0) c.sliding_window = W, types.assign(L, 1);
      break;
    }
    case Family::olmoe:  // OlmoeModel builds a plain causal mask whatever config.json says
      break;
    case Family::dots1: {
      // Dots1Config: layer_types, else the layers from max_window_layers
      // (default 62) on slide, by sliding_window (default 4096); no
      // use_sliding_window switch.
      const int W = r.window(4096);
      if (!r.layer_types(L, &types)) {
        const bool zero = r.has("max_window_layers") && j["max_window_layers"] == 0;
        const int from = zero ? 0
                         : r.has("max_window_layers")
                             ? r.integer_value(j["max_window_layers"], "max_window_layers", kMaxLayers)
                             : 62;
        types.assign(L, 0);
        for (int l = from; l < L; l++) types[l] = 1;
      }
      if (W == 0) types.clear();
      if (!types.empty()) c.sliding_window = W;
      break;
    }
    case Family::qwen2_moe:
    case Family::qwen3_moe:
      // Qwen3-MoE's (and Qwen2-MoE's) sliding layers are not the same across transformers
      // versions (every layer, or those from max_window_layers on); no
      // published model turns them on.
      if (r.boolean("use_sliding_window", false) && r.window(4096) > 0)
        fail(path, ": \"use_sliding_window\" is true, which ratchet does not implement for ", family_name(f),
             " (it needs false: every published Qwen3-MoE and Qwen2-MoE attends over the full sequence)");
      break;
    case Family::gemma3: {
      const int W = r.window(4096);
      if (!r.layer_types(L, &types)) {
        // The older spelling: every pattern-th layer full, the others sliding.
        const int pattern = r.integer("sliding_window_pattern", 6, false, kMaxLayers);
        types.assign(L, 0);
        for (int l = 0; l < L; l++) types[l] = (l + 1) % pattern != 0;
      }
      bool any = false;
      for (auto x : types) any |= x;
      if (any && W == 0)
        fail(path, ": \"sliding_window\" is null but layers slide (layer_types / sliding_window_pattern): "
             "ratchet needs the window's size");
      c.sliding_window = any ? W : 0;
      c.qk_norm = QkNorm::per_head;
      c.norm_placement = NormPlacement::sandwich;
      c.norm_unit_offset = true;
      c.embed_scale = true;
      c.mlp_act = MlpAct::gelu_tanh;
      const double q = r.number("query_pre_attn_scalar", 256.0);
      c.attn_scale = q == c.head_size() ? 0.f : scale_of_scalar(q);
      c.attn_softcap = (float)r.number("attn_logit_softcapping", 0.0);
      c.final_softcap = (float)r.number("final_logit_softcapping", 0.0);
      c.rope_local_theta = local == theta ? 0.f : (float)local;
      break;
    }
  }
  bool any_sliding = false;
  for (auto x : types) any_sliding |= x;
  if (any_sliding) c.layer_sliding = types;
  else c.sliding_window = 0;
  if (f == Family::qwen2 || f == Family::qwen2_moe) c.qkv_bias = true;
  if (f == Family::qwen3 || f == Family::qwen3_moe || f == Family::dots1) c.qk_norm = QkNorm::per_head;
  if (f == Family::olmo2) c.qk_norm = QkNorm::full_width, c.norm_placement = NormPlacement::post;
  if (f == Family::olmoe) c.qk_norm = QkNorm::full_width;

  c.padded_vocab = 0;
  // Checks of the fields together (divisibility, the parameter count) name
  // config.json's keys, not the flags.
  static const ConfigFieldNames kHfNames = {
      "\"num_hidden_layers\"", "\"num_attention_heads\"", "\"hidden_size\"",
      "\"num_key_value_heads\"", "\"intermediate_size\"", "\"vocab_size\"",
      "\"max_position_embeddings\"", "\"rms_norm_eps\"", "\"rope_theta\"",
      "rope_scaling \"original_max_position_embeddings\""};
  try {
    c.finalize(kHfNames);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  RATCHET_ASSERT(hf_family_mismatch(c).empty());
  return c;
}

// ---- GPTConfig -> config.json ----------------------------------------------------

OrderedJson hf_config_to_json(const GPTConfig& c, StDtype dtype) {
  if (const std::string bad = hf_family_mismatch(c); !bad.empty())
    fail("this model's ", bad, " is not what a Hugging Face \"", family_name(c.family),
         "\" model has: it cannot be exported as one (family ", family_name(c.family), ")");
  const Family f = c.family;
  const bool gemma = f == Family::gemma3;
  const int L = c.num_layers;
  OrderedJson j;
  j["architectures"] = {hf_architecture(f)};
  j["model_type"] = family_name(f);
  j["hidden_size"] = c.channels;
  // OLMoE's and Mixtral's intermediate_size is their experts' size.
  j["intermediate_size"] = f == Family::olmoe || f == Family::mixtral ? c.moe_ffn_hidden : c.ffn();
  j["num_hidden_layers"] = L;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.kv_heads();
  j["head_dim"] = c.head_size();
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = shortest_decimal(c.norm_eps);
  j["rope_theta"] = shortest_decimal(c.rope_theta);
  if (c.rope_factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", shortest_decimal(c.rope_factor)},
                         {"low_freq_factor", shortest_decimal(c.rope_low_freq_factor)},
                         {"high_freq_factor", shortest_decimal(c.rope_high_freq_factor)},
                         {"original_max_position_embeddings", c.rope_original_max_pos}};
  else
    j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["torch_dtype"] = dtype == StDtype::BF16 ? "bfloat16" : "float32";
  if (gemma) j["hidden_activation"] = "gelu_pytorch_tanh";
  else j["hidden_act"] = "silu";
  if (f != Family::qwen2 && f != Family::mistral && f != Family::qwen2_moe) j["attention_bias"] = false;
  if (f == Family::llama || f == Family::smollm3) j["mlp_bias"] = false;
  if (f == Family::olmo2) j["clip_qkv"] = nullptr;
  if (f == Family::dots1) {  // Dots1Config's names (DeepSeek-V3's)
    int k = 0;
    first_k_dense(c, &k);
    j["n_routed_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.experts_per_tok;
    j["moe_intermediate_size"] = c.moe_ffn_hidden;
    j["n_shared_experts"] = c.n_shared_experts;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["first_k_dense_replace"] = k;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["routed_scaling_factor"] = shortest_decimal(c.routed_scaling_factor);
  } else if (c.num_experts > 0) {  // issue 39
    j[f == Family::mixtral ? "num_local_experts" : "num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.experts_per_tok;
    if (f == Family::qwen3_moe || f == Family::qwen2_moe) {
      j["moe_intermediate_size"] = c.moe_ffn_hidden;
      j["decoder_sparse_step"] = c.decoder_sparse_step;
      j["mlp_only_layers"] = c.mlp_only_layers;
    }
    if (f == Family::qwen2_moe) {
      j["shared_expert_intermediate_size"] = c.shared_expert_ffn;
      j["qkv_bias"] = true;
    }
    if (f != Family::mixtral) j["norm_topk_prob"] = c.norm_topk_prob;
    j["router_aux_loss_coef"] = shortest_decimal(c.router_aux_loss_coef);
    j["output_router_logits"] = false;
    if (f == Family::mixtral) j["router_jitter_noise"] = 0.0;
    if (f == Family::olmoe)
      j["clip_qkv"] = c.clip_qkv > 0 ? nlohmann::json(shortest_decimal(c.clip_qkv)) : nlohmann::json(nullptr);
  }

  int first_sliding = L;
  bool any = false;
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < L; l++) {
    const bool s = c.window(l) > 0;
    types.push_back(s ? "sliding_attention" : "full_attention");
    if (s && !any) first_sliding = l;
    any |= s;
  }
  const nlohmann::json window = any ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
  switch (f) {
    case Family::llama:
    case Family::olmo2:
      break;
    case Family::qwen2:
    case Family::qwen3:
    case Family::smollm3:
      if (f == Family::smollm3) {
        nlohmann::json rope = nlohmann::json::array();
        for (int l = 0; l < L; l++) rope.push_back(c.layer_has_rope(l) ? 1 : 0);
        j["no_rope_layers"] = rope;
      }
      j["use_sliding_window"] = any;
      j["sliding_window"] = window;
      // Older transformers read max_window_layers, newer layer_types: both
      // say the same where the sliding layers are the last ones.
      if (f != Family::smollm3) j["max_window_layers"] = first_sliding;
      j["layer_types"] = types;
      break;
    case Family::mistral:
    case Family::mixtral:
      j["sliding_window"] = window;
      break;
    case Family::olmoe:
      break;
    case Family::dots1:
      j["sliding_window"] = window;
      j["max_window_layers"] = first_sliding;
      j["layer_types"] = types;
      break;
    case Family::qwen3_moe:
    case Family::qwen2_moe:
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      break;
    case Family::gemma3: {
    {
      // transformers types the field int (Gemma3TextConfig: `query_pre_attn_scalar: int`), and its
      // strict config refuses 24.0 (seen on the GPU node, transformers 5.17): an integral scalar is
      // written as an integer, any other as the shortest decimal of the same scale.
      const double q = c.attn_scale == 0 ? (double)c.head_size() : scalar_of_scale(c.attn_scale);
      if (q == std::floor(q) && q > 0 && q < 9.0e15) j["query_pre_attn_scalar"] = (std::int64_t)q;
      else j["query_pre_attn_scalar"] = q;
    }
      j["sliding_window"] = any ? c.sliding_window : 4096;  // unused without sliding layers
      j["layer_types"] = types;
      // The older spelling, where the layers follow one (every N-th full).
      for (int n = 1; n <= L + 1; n++) {
        bool fits = true;
        for (int l = 0; l < L; l++) fits &= (c.window(l) > 0) == ((l + 1) % n != 0);
        if (fits) {
          j["sliding_window_pattern"] = n;
          break;
        }
      }
      j["rope_local_base_freq"] = shortest_decimal(c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta);
      j["attn_logit_softcapping"] = c.attn_softcap > 0 ? nlohmann::json(shortest_decimal(c.attn_softcap))
                                                       : nlohmann::json(nullptr);
      j["final_logit_softcapping"] = c.final_softcap > 0 ? nlohmann::json(shortest_decimal(c.final_softcap))
                                                         : nlohmann::json(nullptr);
      break;
    }
  }
  return j;
}

}  // namespace ratchet
