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

namespace ratchet {

enum class Arch { gpt2, llama };

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

  int head_size() const { return channels / num_heads; }
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * channels; }
  bool llama() const { return arch == Arch::llama; }
  // Rows of the fused qkv projection: (NH + 2·KV)·hs (3C for GPT-2).
  int qkv_channels() const { return (num_heads + 2 * kv_heads()) * head_size(); }
  // Fills padded_vocab from vocab_size and checks the shape (bounds
  // included); throws Error naming the offending field as `names` calls it.
  void finalize(const ConfigFieldNames& names = kFlagNames);
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
