// Hugging Face checkpoints of the Llama family in and out (issue 38: llama,
// qwen2, qwen3, olmo2, smollm3, mistral, gemma3_text; issue 39: qwen3_moe,
// olmoe, mixtral, dots1, qwen2_moe): config.json <->
// GPTConfig (Arch::llama, `family` from model_type; hf_config.cpp), HF
// tensor names <-> the flat parameter buffer (model/param_layout.h),
// safetensors files (interop/safetensors.h).
//
// Names, for layer N (every one is a contiguous block of the flat buffer):
//   model.embed_tokens.weight                      (V, C)      wte rows [0, V)
//   model.layers.N.input_layernorm.weight          (C)         ln1w[N] (not OLMo 2)
//   model.layers.N.self_attn.{q,k,v}_proj.weight   (NH*hs | KV*hs | KV*hs, C)  qkvw[N] row blocks
//   model.layers.N.self_attn.{q,k,v}_proj.bias     (NH*hs | KV*hs | KV*hs)     qkvb[N] (Qwen2)
//   model.layers.N.self_attn.{q,k}_norm.weight     (hs) per head (Qwen3, Gemma 3), or
//                                                  (NH*hs | KV*hs) full width (OLMo 2)  qnormw, knormw
//   model.layers.N.self_attn.o_proj.weight         (C, NH*hs)  attprojw[N]
//   model.layers.N.post_attention_layernorm.weight (C)         ln2w[N] (pre norms: Llama, Qwen,
//                                                  SmolLM3, Mistral); attnpostw[N] (OLMo 2, Gemma 3)
//   model.layers.N.pre_feedforward_layernorm.weight (C)        ln2w[N] (Gemma 3)
//   model.layers.N.mlp.{gate,up}_proj.weight       (H, C)      fcw[N] row blocks
//   model.layers.N.mlp.down_proj.weight            (C, H)      fcprojw[N]
//   model.layers.N.post_feedforward_layernorm.weight (C)       mlppostw[N] (OLMo 2, Gemma 3)
// and a MoE layer's MLP (issue 39; qwen3_moe, olmoe, mixtral) instead of the
// three mlp.*_proj tensors (E experts, I = moe_intermediate_size):
//   model.layers.N.mlp.gate.weight                 (E, C)      routerw[N]
//   model.layers.N.mlp.experts.M.{gate,up}_proj.weight (I, C)  expw1[N][M] row blocks
//   model.layers.N.mlp.experts.M.down_proj.weight  (C, I)      expw2[N][M]
//   Mixtral: model.layers.N.block_sparse_moe.gate.weight, and
//   block_sparse_moe.experts.M.w1 (gate), w3 (up), w2 (down)
//   dots1 (DeepSeek-V3's MoE), besides the router and experts:
//   model.layers.N.mlp.shared_experts.{gate,up}_proj.weight (Is, C)  shw1[N] row blocks
//   model.layers.N.mlp.shared_experts.down_proj.weight (C, Is)       shw2[N]
//   model.layers.N.mlp.gate.e_score_correction_bias (E): the selection
//   bias, not a parameter: GPT::moe_bias()'s row N (hf_bias_map)
//   qwen2_moe (Qwen2MoeSparseMoeBlock), besides the router and experts:
//   model.layers.N.mlp.shared_expert.{gate,up}_proj.weight (Is, C)  shw1[N] row blocks
//   model.layers.N.mlp.shared_expert.down_proj.weight (C, Is)       shw2[N]
//   model.layers.N.mlp.shared_expert_gate.weight   (1, C)      shgate[N]
//   model.norm.weight                              (C)         lnfw
//   lm_head.weight                                 (V, C)      lmhead (untied only)
// RoPE uses HF's rotate_half convention here too, so q/k need no permutation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "interop/safetensors.h"
#include "model/config.h"
#include "model/expert_slice.h"

namespace ratchet {

// One HF tensor: its name, shape, and where it lives in the flat buffer.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // elements into the flat parameter buffer; prod(shape) elements
};

// Every tensor of a llama config, in HF's order (embedding, layers, norm, head).
// A MoE layer's experts are named per expert as the hub's files have them,
// or, with `fused_experts`, as transformers' fused parameters
// mlp.experts.gate_up_proj (E, 2I, C) and mlp.experts.down_proj (E, C, I)
// (what an import also accepts; an export writes the hub's names).
std::vector<HfTensor> hf_tensor_map(const GPTConfig& c, bool fused_experts = false);
// The selection bias's tensors (dots1: mlp.gate.e_score_correction_bias of
// each MoE layer; none for the other families): offsets into the (L,E)
// bias GPT::moe_bias() holds, not into the flat parameters.
std::vector<HfTensor> hf_bias_map(const GPTConfig& c);

// config.json -> GPTConfig (finalized), the family from model_type. Throws
// Error naming `path` and the field: a missing or bad field, an unknown
// model_type (listing those ratchet imports), a field whose value ratchet
// does not implement (rope_scaling "yarn", clip_qkv, attention_bias true ...).
GPTConfig hf_config_from_json(const nlohmann::json& j, const std::string& path);
// GPTConfig -> the family's config.json, with torch_dtype for `dtype`;
// Error when the config's options are not its family's (hf_family_mismatch).
OrderedJson hf_config_to_json(const GPTConfig& c, StDtype dtype);
// The family's transformers class: "LlamaForCausalLM", ..., "Gemma3ForCausalLM".
const char* hf_architecture(Family f);
// The first option of c (by GPTConfig's field name) that its family's
// Hugging Face model does not have as set (qk_norm on a llama, a NoPE layer
// on a qwen3, ...); "" when the family's config.json describes c.
std::string hf_family_mismatch(const GPTConfig& c);

// True for a path --init-from should read as Hugging Face: a directory or a
// file ending in .safetensors.
bool is_hf_checkpoint_path(const std::string& path);

// Everything load_hf_checkpoint() checks but the values: config.json, and
// every tensor present with its shape; nothing of the model's size allocated.
// `note`: what to tell the user about the files chosen (SafetensorsCheckpoint::note).
GPTConfig read_hf_checkpoint_config(const std::string& path, std::string* note = nullptr);
// Reads config.json (in the directory, or beside FILE.safetensors) and the
// safetensors file(s); returns the FP32 flat parameters (BF16/F16 widened).
// Errors name the file and tensor: a missing or extra tensor, a shape or
// dtype that does not match config.json, a NaN or inf value, and every
// safetensors error.
// moe_bias (or null): the selection bias (L,E), read from hf_bias_map's
// tensors where the family has them (dots1), else left empty.
std::vector<float> load_hf_checkpoint(const std::string& path, GPTConfig* cfg,
                                      std::vector<float>* moe_bias = nullptr);
// The same into an expert slice's flat parameters (--expert-parallel:
// ParamLayout(cfg, x.shards).total floats in the slice's local layout,
// model/expert_slice.h): the other experts' tensors are not read, and a
// fused expert tensor (all experts of a layer) is read whole once and only
// the slice's experts kept, so a rank never holds the whole model (122 GB in
// FP32 for qwen3-30b-a3b). Its checks are load_hf_checkpoint's on what it
// reads; the whole model's checks need every rank's reads. x not partial:
// load_hf_checkpoint.
std::vector<float> load_hf_checkpoint_slice(const std::string& path, GPTConfig* cfg,
                                            ExpertSlice x, std::vector<float>* moe_bias = nullptr);

// Before a run: DIR can take an export (creatable; no earlier export's files
// unless `overwrite`). Error naming `flag` and DIR.
void check_hf_export_dir(const char* flag, const std::string& dir, bool overwrite);

// Writes config.json and model.safetensors (or shards of at most
// max_shard_bytes + index) into dir, atomically per file; dtype F32 or BF16.
// Files of an earlier export are replaced only with `overwrite`; stale shards
// of an earlier export are then removed.
// moe_bias: the model's selection bias (L,E), written as hf_bias_map's
// tensors (dots1); empty: zeros there (a model routed without one).
void save_hf_checkpoint(const std::string& dir, const GPTConfig& cfg, const std::vector<float>& params,
                        StDtype dtype, bool overwrite, uint64_t max_shard_bytes = 5'000'000'000ull,
                        const std::vector<float>& moe_bias = {});

// "f32" | "bf16" (any case) -> dtype; Error naming `flag` otherwise.
StDtype parse_export_dtype(const char* flag, const std::string& s);

}  // namespace ratchet
