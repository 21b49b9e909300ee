#include "interop/hf_checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>

#include "core/error.h"
#include "interop/atomic_write.h"
#include "model/expert_slice.h"
#include "model/param_layout.h"

namespace ratchet {
namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = (char)std::tolower((unsigned char)ch);
  return s;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// config.json's key for the weights' dtype: torch_dtype, or "dtype" as newer
// transformers write it; "" when neither is a string.
const char* dtype_key(const nlohmann::json& j) {
  for (const char* k : {"torch_dtype", "dtype"})
    if (j.contains(k) && j[k].is_string()) return k;
  return "";
}

// config.json's torch_dtype as a safetensors dtype; false when absent or other.
bool torch_dtype(const nlohmann::json& j, StDtype* d) {
  const char* key = dtype_key(j);
  if (!*key) return false;
  const std::string s = j[key].get<std::string>();
  if (s == "float32") *d = StDtype::F32;
  else if (s == "bfloat16") *d = StDtype::BF16;
  else if (s == "float16") *d = StDtype::F16;
  else return false;
  return true;
}

// A file of an earlier export in dir: config.json, the index, model.safetensors
// or a shard model-NNNNN-of-NNNNN.safetensors. Exactly these names: an
// overwrite removes stale ones, and must not take a user's
// model.orig.safetensors or model-backup.safetensors with them.
bool is_export_file(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n == "config.json" || n == "model.safetensors.index.json" || n == "model.safetensors") return true;
  const std::string shard = "model-00000-of-00000.safetensors";  // the shape of a shard's name
  if (n.size() != shard.size()) return false;
  for (size_t i = 0; i < n.size(); ++i)
    if (shard[i] == '0' ? !std::isdigit((unsigned char)n[i]) : n[i] != shard[i]) return false;
  return true;
}

// An exclusive flock on the directory itself (no lock file left among the
// export's files), held while one export writes there.
class ExportDirLock {
 public:
  explicit ExportDirLock(const std::string& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open the export directory ", dir, ": ", std::strerror(errno));
    // Another export takes seconds; a holder stopped for longer is named.
    for (int i = 0; ::flock(fd_, LOCK_EX | LOCK_NB) != 0; i++) {
      if (errno != EWOULDBLOCK) return;  // cannot lock here (some network file systems): go on
      if (i == 6000) {
        ::close(fd_);
        fail("the export directory ", dir, " has been locked by another export for 10 minutes: "
             "wait for it, or export elsewhere");
      }
      ::usleep(100000);
    }
  }
  ~ExportDirLock() { ::close(fd_); }
  ExportDirLock(const ExportDirLock&) = delete;
  ExportDirLock& operator=(const ExportDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::vector<HfTensor> hf_tensor_map(const GPTConfig& c, bool fused_experts) {
  RATCHET_ASSERT(c.arch == Arch::llama);
  const ParamLayout lay(c);
  const int64_t C = c.channels, L = c.num_layers, NH = c.num_heads, KV = c.kv_heads(),
                hs = c.head_size(), H = c.ffn(), V = c.vocab_size;
  const int64_t qkv_rows = (NH + 2 * KV) * hs;
  // q/k norm weights: one [hs] per layer (per head), or the whole width (OLMo 2).
  const int64_t qn = c.qk_norm == QkNorm::full_width ? NH * hs : hs,
                kn = c.qk_norm == QkNorm::full_width ? KV * hs : hs;
  // The layout must be the contract's (model/param_layout.h) for the blocks below to be right.
  RATCHET_ASSERT(lay.sizes[P_QKVW] == (size_t)(L * qkv_rows * C));
  RATCHET_ASSERT(lay.sizes[P_QKVB] == (c.qkv_bias ? (size_t)(L * qkv_rows) : 0));
  // MoE (issue 39): the dense MLP's tensors exist where some layer is dense,
  // the experts' where some layer is MoE, each with a slice for every layer.
  const int64_t E = c.num_experts, I = c.moe_ffn_hidden, Lm = c.moe_layer_count();
  const bool any_dense = Lm < L, any_moe = Lm > 0;
  RATCHET_ASSERT(lay.sizes[P_FCW] == (any_dense ? (size_t)(L * 2 * H * C) : 0));
  RATCHET_ASSERT(lay.sizes[P_FCPROJW] == (any_dense ? (size_t)(L * C * H) : 0));
  RATCHET_ASSERT(lay.sizes[P_ROUTERW] == (any_moe ? (size_t)(L * E * C) : 0));
  RATCHET_ASSERT(lay.sizes[P_EXPW1] == (any_moe ? (size_t)(L * E * 2 * I * C) : 0));
  RATCHET_ASSERT(lay.sizes[P_EXPW2] == (any_moe ? (size_t)(L * E * C * I) : 0));
  const int64_t Is = c.shared_ffn();
  RATCHET_ASSERT(lay.sizes[P_SHW1] == (any_moe ? (size_t)(L * 2 * Is * C) : 0));
  const bool gated = c.shared_expert_gated();  // Qwen2-MoE: shared_expert_gate (1, C) per MoE layer
  RATCHET_ASSERT(lay.sizes[P_SHGATE] == (any_moe && gated ? (size_t)(L * C) : 0));
  RATCHET_ASSERT(lay.sizes[P_LMHEAD] == (c.tied_embeddings ? 0 : (size_t)(c.padded_vocab * C)));
  RATCHET_ASSERT(lay.sizes[P_QNORMW] == (c.qk_norm == QkNorm::none ? 0 : (size_t)(L * qn)));
  RATCHET_ASSERT(lay.sizes[P_KNORMW] == (c.qk_norm == QkNorm::none ? 0 : (size_t)(L * kn)));
  RATCHET_ASSERT(lay.sizes[P_LN1W] == (c.has_pre_norms() ? (size_t)(L * C) : 0));
  RATCHET_ASSERT(lay.sizes[P_ATTNPOSTW] == (c.has_post_norms() ? (size_t)(L * C) : 0));

  // Each family's names for the norms (transformers' modeling_<family>.py):
  // pre (Llama): input_layernorm, post_attention_layernorm before the MLP;
  // post (OLMo 2): post_attention_layernorm and post_feedforward_layernorm on
  // the branches' outputs; sandwich (Gemma 3): input_layernorm,
  // post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm.
  const bool sandwich = c.norm_placement == NormPlacement::sandwich;
  const bool mixtral = c.family == Family::mixtral;
  std::vector<HfTensor> m;
  m.push_back({"model.embed_tokens.weight", {V, C}, lay.offsets[P_WTE]});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const size_t qkv = lay.offsets[P_QKVW] + l * qkv_rows * C;
    const size_t fc = lay.offsets[P_FCW] + l * 2 * H * C;
    if (c.has_pre_norms()) m.push_back({p + "input_layernorm.weight", {C}, lay.offsets[P_LN1W] + l * C});
    m.push_back({p + "self_attn.q_proj.weight", {NH * hs, C}, qkv});
    m.push_back({p + "self_attn.k_proj.weight", {KV * hs, C}, qkv + NH * hs * C});
    m.push_back({p + "self_attn.v_proj.weight", {KV * hs, C}, qkv + (NH + KV) * hs * C});
    if (c.qkv_bias) {  // Qwen2: the bias rows q | k | v of qkvb
      const size_t b = lay.offsets[P_QKVB] + l * qkv_rows;
      m.push_back({p + "self_attn.q_proj.bias", {NH * hs}, b});
      m.push_back({p + "self_attn.k_proj.bias", {KV * hs}, b + NH * hs});
      m.push_back({p + "self_attn.v_proj.bias", {KV * hs}, b + (NH + KV) * hs});
    }
    if (c.qk_norm != QkNorm::none) {
      m.push_back({p + "self_attn.q_norm.weight", {qn}, lay.offsets[P_QNORMW] + l * qn});
      m.push_back({p + "self_attn.k_norm.weight", {kn}, lay.offsets[P_KNORMW] + l * kn});
    }
    m.push_back({p + "self_attn.o_proj.weight", {C, NH * hs}, lay.offsets[P_ATTPROJW] + l * C * NH * hs});
    if (c.has_post_norms())
      m.push_back({p + "post_attention_layernorm.weight", {C}, lay.offsets[P_ATTNPOSTW] + l * C});
    if (c.has_pre_norms())
      m.push_back({p + (sandwich ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), {C},
                   lay.offsets[P_LN2W] + l * C});
    if (!c.layer_is_moe((int)l)) {
      m.push_back({p + "mlp.gate_proj.weight", {H, C}, fc});
      m.push_back({p + "mlp.up_proj.weight", {H, C}, fc + H * C});
      m.push_back({p + "mlp.down_proj.weight", {C, H}, lay.offsets[P_FCPROJW] + l * C * H});
    } else {
      // The router and each expert as the hub's files name them (per expert;
      // Mixtral's w1 = gate_proj, w3 = up_proj, w2 = down_proj), or
      // transformers' fused in-memory tensors: gate_up_proj (E, 2I, C), gate
      // rows first, and down_proj (E, C, I), which are expw1[l] and expw2[l]
      // as they stand.
      const size_t w1 = lay.offsets[P_EXPW1] + l * E * 2 * I * C, w2 = lay.offsets[P_EXPW2] + l * E * C * I;
      const std::string moe = p + (mixtral && !fused_experts ? "block_sparse_moe." : "mlp.");
      m.push_back({moe + "gate.weight", {E, C}, lay.offsets[P_ROUTERW] + l * E * C});
      if (fused_experts) {
        m.push_back({moe + "experts.gate_up_proj", {E, 2 * I, C}, w1});
        m.push_back({moe + "experts.down_proj", {E, C, I}, w2});
      } else {
        for (int64_t e = 0; e < E; ++e) {
          const std::string x = moe + "experts." + std::to_string(e) + ".";
          m.push_back({x + (mixtral ? "w1" : "gate_proj") + ".weight", {I, C}, w1 + e * 2 * I * C});
          m.push_back({x + (mixtral ? "w3" : "up_proj") + ".weight", {I, C}, w1 + e * 2 * I * C + I * C});
          m.push_back({x + (mixtral ? "w2" : "down_proj") + ".weight", {C, I}, w2 + e * C * I});
        }
      }
      if (Is > 0) {  // DeepSeek-V3's shared experts (dots1) or Qwen2-MoE's one gated shared expert: one MLP of Is
        const size_t s1 = lay.offsets[P_SHW1] + l * 2 * Is * C;
        const std::string sh = moe + (gated ? "shared_expert." : "shared_experts.");
        m.push_back({sh + "gate_proj.weight", {Is, C}, s1});
        m.push_back({sh + "up_proj.weight", {Is, C}, s1 + Is * C});
        m.push_back({sh + "down_proj.weight", {C, Is}, lay.offsets[P_SHW2] + l * C * Is});
        if (gated) m.push_back({moe + "shared_expert_gate.weight", {1, C}, lay.offsets[P_SHGATE] + l * C});
      }
    }
    if (c.has_post_norms())
      m.push_back({p + "post_feedforward_layernorm.weight", {C}, lay.offsets[P_MLPPOSTW] + l * C});
  }
  m.push_back({"model.norm.weight", {C}, lay.offsets[P_LNFW]});
  if (!c.tied_embeddings) m.push_back({"lm_head.weight", {V, C}, lay.offsets[P_LMHEAD]});
  return m;
}

std::vector<HfTensor> hf_bias_map(const GPTConfig& c) {
  std::vector<HfTensor> m;
  if (c.family != Family::dots1) return m;
  const int64_t E = c.num_experts;
  for (int l = 0; l < c.num_layers; l++)
    if (c.layer_is_moe(l))
      m.push_back({"model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias", {E},
                   (size_t)l * E});
  return m;
}

bool is_hf_checkpoint_path(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || fs::path(path).extension() == ".safetensors";
}

namespace {
// An HF checkpoint opened and checked against its config.json, every tensor
// present with its shape and dtype, before any value is read: what
// read_hf_checkpoint_config() stops at and load_hf_checkpoint() reads.
struct OpenedHf {
  std::string config_path;
  nlohmann::json j;
  GPTConfig c;
  std::unique_ptr<SafetensorsCheckpoint> ck;
  std::vector<HfTensor> map;
  std::vector<HfTensor> bias_map;  // hf_bias_map: offsets into the (L,E) selection bias
};

OpenedHf open_hf_checkpoint(const std::string& path) {
  OpenedHf o;
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  const std::string config_path = (dir / "config.json").string();
  // A ratchet checkpoint (a step directory with its commit marker, or a
  // --ckpt-dir with `latest`) is not a Hugging Face one: say what to do.
  if (!fs::is_regular_file(config_path, ec) &&
      (fs::exists(dir / "COMMITTED", ec) || fs::exists(dir / "latest", ec)))
    fail("--init-from ", path, " is a ratchet checkpoint, not a Hugging Face one: to continue that run pass --ckpt-dir ",
         fs::exists(dir / "COMMITTED", ec) ? fs::absolute(dir / "..", ec).lexically_normal().string() : dir.string(),
         "; to start a new run from its weights, `ratchet ckpt export ", path,
         " --format hf --output DIR` (llama) or `--format llmc --output FILE.bin` (gpt2) and --init-from that");
  check_not_dangling(config_path);
  if (!fs::is_regular_file(config_path, ec))
    fail("--init-from ", path, ": no config.json in ", dir.empty() ? "." : dir.string(),
         ": a Hugging Face checkpoint needs its config.json next to the safetensors file(s)");
  o.config_path = config_path;
  o.j = read_checkpoint_json(config_path);
  const nlohmann::json& j = o.j;
  o.c = hf_config_from_json(j, config_path);
  const GPTConfig& c = o.c;
  StDtype want_dtype = StDtype::F32;
  const bool check_dtype = torch_dtype(j, &want_dtype);

  o.ck = std::make_unique<SafetensorsCheckpoint>(path);
  const SafetensorsCheckpoint& ck = *o.ck;
  // MoE experts per expert (the hub's files) or fused (transformers' own
  // parameters, as a checkpoint saved without its conversion has them): the
  // first MoE layer's names say which.
  bool fused = false;
  for (int l = 0; l < c.num_layers; l++)
    if (c.layer_is_moe(l)) {
      const SafetensorsFile* f = nullptr;
      fused = ck.find("model.layers." + std::to_string(l) + ".mlp.experts.gate_up_proj", &f) != nullptr;
      break;
    }
  // The files' tensors bound the model before its map of 9 tensors per layer
  // is built: a config.json saying 10^6 layers over a few tensors is refused
  // here, not after a gigabyte of names (issue 25). Within twice what the
  // files hold, the map is built and names the first missing tensor.
  {
    const std::string inv_freq = "rotary_emb.inv_freq";
    size_t held = 0;
    for (const auto& name : ck.names())
      held += !(name.size() >= inv_freq.size() &&
                name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0);
    const double per_layer = 7.0 + (c.has_pre_norms() ? 2 : 0) + (c.has_post_norms() ? 2 : 0) +
                             (c.qkv_bias ? 3 : 0) + (c.qk_norm != QkNorm::none ? 2 : 0);
    // A MoE layer has the router and 3 tensors per expert (or 2 fused) for the MLP's 3.
    const double moe_extra = fused ? 0.0 : 3.0 * c.num_experts - 2.0;
    const double implied = per_layer * c.num_layers + moe_extra * c.moe_layer_count() + 2 + (c.tied_embeddings ? 0 : 1);
    if (implied > 2.0 * held)
      fail(path, " holds ", held, " tensors but ", config_path, " (num_hidden_layers ", c.num_layers,
           c.tied_embeddings ? ", tied" : ", untied", " embeddings) implies ", (long long)implied,
           ": the checkpoint is incomplete or config.json belongs to another model");
  }
  o.map = hf_tensor_map(c, fused);
  o.bias_map = hf_bias_map(c);
  const auto& map = o.map;
  std::set<std::string> expected;
  for (const auto& t : map) expected.insert(t.name);
  for (const auto& t : o.bias_map) expected.insert(t.name);
  for (const auto& name : ck.names()) {
    if (expected.count(name)) continue;
    // Older exports keep RoPE's inverse frequencies as a buffer; they follow from rope_theta.
    const std::string inv_freq = "rotary_emb.inv_freq";
    if (name.size() >= inv_freq.size() &&
        name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0)
      continue;
    const SafetensorsFile* f = nullptr;
    ck.find(name, &f);
    if (name == "lm_head.weight" && c.tied_embeddings)
      fail(f->path(), " has tensor 'lm_head.weight' but ", config_path, " says tie_word_embeddings "
           "true: set it to false to import the separate head, or drop the tensor");
    fail(f->path(), " has tensor '", name, "' that a ", family_name(c.family), " model with ", config_path,
         "'s shape does not have (", c.num_layers, " layers", c.tied_embeddings ? ", tied" : ", untied",
         " embeddings): wrong config.json, or not a ", family_name(c.family), " checkpoint");
  }
  std::vector<const HfTensor*> all;
  for (const auto& t : map) all.push_back(&t);
  for (const auto& t : o.bias_map) all.push_back(&t);
  for (const HfTensor* tp : all) {
    const HfTensor& t = *tp;
    const SafetensorsFile* f = nullptr;
    const StTensor* st = ck.find(t.name, &f);
    if (!st)
      fail(path, " has no tensor '", t.name, "' that ", config_path, " implies",
           t.name == "lm_head.weight"                                   ? " (tie_word_embeddings is false)"
           : tp >= o.bias_map.data() && tp < o.bias_map.data() + o.bias_map.size() ? " (a dots1 router's selection bias, e_score_correction_bias)"
                                                                                    : "",
           ": the checkpoint is incomplete or config.json belongs to another model");
    if (st->shape != t.shape)
      fail(f->path(), ": tensor '", t.name, "' has shape ", shape_str(st->shape), " but ", config_path,
           " implies ", shape_str(t.shape));
    // DeepSeek-style checkpoints keep the selection bias in F32 beside BF16
    // weights (it is a buffer, read widened to FP32 either way).
    const bool bias = tp >= o.bias_map.data() && tp < o.bias_map.data() + o.bias_map.size();
    if (check_dtype && st->dtype != want_dtype && !(bias && st->dtype == StDtype::F32))
      fail(f->path(), ": tensor '", t.name, "' is ", st_dtype_name(st->dtype), " but ", config_path,
           " says ", dtype_key(j), " ", j[dtype_key(j)].dump());
  }
  return o;
}
}  // namespace

GPTConfig read_hf_checkpoint_config(const std::string& path, std::string* note) {
  const OpenedHf o = open_hf_checkpoint(path);
  if (note) *note = o.ck->note();
  return o.c;
}

std::vector<float> load_hf_checkpoint(const std::string& path, GPTConfig* cfg,
                                      std::vector<float>* moe_bias) {
  return load_hf_checkpoint_slice(path, cfg, ExpertSlice{}, moe_bias);
}

std::vector<float> load_hf_checkpoint_slice(const std::string& path, GPTConfig* cfg, ExpertSlice x,
                                            std::vector<float>* moe_bias) {
  const OpenedHf o = open_hf_checkpoint(path);
  const GPTConfig& c = o.c;
  // An Error for a slice this model cannot have (N not dividing its experts).
  const std::vector<FlatSegment> segments = x.partial() ? local_segments(c, x) : std::vector<FlatSegment>{};
  std::vector<float> params(ParamLayout(c, x.shards).total, 0.0f);  // padded vocab rows stay zero
  std::vector<float> bias;
  if (!o.bias_map.empty()) bias.assign((size_t)c.num_layers * c.num_experts, 0.f);  // dense rows 0
  auto read = [&](const HfTensor& t, float* dst) {
    const SafetensorsFile* f = nullptr;
    const StTensor* st = o.ck->find(t.name, &f);
    f->read_f32(*st, dst);
    // A NaN or inf would train (or fail later, naming a step) from damaged weights.
    for (int64_t i = 0; i < st->numel(); ++i)
      if (!std::isfinite(dst[i]))
        fail(f->path(), ": tensor '", t.name, "' holds ", dst[i], " at element ", i,
             ": the checkpoint is damaged (or was saved after a diverged run); ratchet imports finite weights only");
  };
  std::vector<float> whole;  // a tensor the slice holds part of (fused experts)
  for (const auto& t : o.map) {
    if (segments.empty()) {
      read(t, params.data() + t.offset);
      continue;
    }
    size_t n = 1;
    for (int64_t d : t.shape) n *= (size_t)d;
    // The slice's runs of [t.offset, t.offset + n): global a, local place, length.
    struct Part { size_t a, local, len; };
    std::vector<Part> parts;
    for (const FlatSegment& sg : segments) {
      const size_t a = std::max(t.offset, sg.global), b = std::min(t.offset + n, sg.global + sg.len);
      if (a < b) parts.push_back({a, sg.local + (a - sg.global), b - a});
    }
    if (parts.empty()) continue;  // another slice's expert
    if (parts.size() == 1 && parts[0].len == n) {
      read(t, params.data() + parts[0].local);
      continue;
    }
    whole.resize(n);
    read(t, whole.data());
    for (const Part& p : parts)
      std::copy(whole.begin() + (ptrdiff_t)(p.a - t.offset),
                whole.begin() + (ptrdiff_t)(p.a - t.offset + p.len), params.begin() + (ptrdiff_t)p.local);
  }
  for (const auto& t : o.bias_map) read(t, bias.data() + t.offset);
  *cfg = c;
  if (moe_bias) *moe_bias = std::move(bias);
  return params;
}

// ---- export -----------------------------------------------------------------------

void check_hf_export_dir(const char* flag, const std::string& dir, bool overwrite) {
  if (dir.empty()) return;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail(flag, " ", dir, " exists and is not a directory: give a directory for the Hugging Face export");
  if (fs::is_directory(dir, ec) && !overwrite)
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (is_export_file(e.path()))
        fail(flag, " ", dir, " already holds ", e.path().filename().string(),
             " of an earlier export: pass --overwrite to replace it, or choose another directory");
}

void save_hf_checkpoint(const std::string& dir, const GPTConfig& cfg, const std::vector<float>& params,
                        StDtype dtype, bool overwrite, uint64_t max_shard_bytes,
                        const std::vector<float>& moe_bias) {
  if (cfg.arch != Arch::llama)
    fail("the Hugging Face export writes Llama-family models (--arch llama); this model is GPT-2: use "
         "--export / ckpt export --format llmc for llm.c's format");
  RATCHET_ASSERT(params.size() == ParamLayout(cfg).total);
  // A model its family's config.json cannot describe is refused before anything is written.
  const std::string config_text = hf_config_to_json(cfg, dtype).dump(2) + "\n";
  // Diverged weights are not a model (issue 25): nothing is written.
  if (const std::string bad = first_non_finite(ParamLayout(cfg), params); !bad.empty())
    throw std::runtime_error("not writing the Hugging Face export " + dir + ": " + bad +
                             ": the weights are not finite (the run diverged)");
  check_hf_export_dir("export directory", dir, overwrite);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create the export directory ", dir, ": ", ec.message());
  // One export into a directory at a time (trials of a sweep sharing one
  // --export-hf): interleaved renames would leave shards of two models under
  // one index. Checked again under the lock: another may have exported since.
  const ExportDirLock lock(dir);
  check_hf_export_dir("export directory", dir, overwrite);

  std::vector<StWrite> ts;
  for (const auto& t : hf_tensor_map(cfg)) ts.push_back({t.name, t.shape, params.data() + t.offset});
  // dots1's selection bias: the model's, or zeros (routing without one is routing with zeros).
  const std::vector<HfTensor> bias_map = hf_bias_map(cfg);
  const std::vector<float> zeros(bias_map.empty() || !moe_bias.empty() ? 0 : (size_t)cfg.num_layers * cfg.num_experts, 0.f);
  const std::vector<float>& bias = moe_bias.empty() ? zeros : moe_bias;
  RATCHET_ASSERT(bias_map.empty() || bias.size() == (size_t)cfg.num_layers * cfg.num_experts);
  for (const auto& t : bias_map) ts.push_back({t.name, t.shape, bias.data() + t.offset});
  // config.json is written before the weights and renamed after them, so that
  // a failure (a full disk) leaves an earlier export whole (safetensors.h).
  const std::string config = (fs::path(dir) / "config.json").string();
  write_text_atomically(config + ".partial", config_text);
  std::vector<std::string> written;
  try {
    // transformers refuses safetensors without metadata format "pt".
    written = write_safetensors_checkpoint(dir, ts, dtype, {{"format", "pt"}}, max_shard_bytes);
  } catch (...) {
    std::remove((config + ".partial").c_str());
    throw;
  }
  // Shards or an index of an earlier, differently split export would mislead
  // readers; .partial files of an export that was killed are litter.
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const bool partial = e.path().extension() == ".partial" && n != "config.json.partial" &&
                         is_export_file(e.path().stem());
    if (partial || (n != "config.json" && is_export_file(e.path()) &&
                    std::find(written.begin(), written.end(), n) == written.end()))
      stale.push_back(e.path());
  }
  for (const auto& p : stale) fs::remove(p, ec);
  if (std::rename((config + ".partial").c_str(), config.c_str()) != 0)
    fail("cannot rename ", config, ".partial to ", config, ": ", std::strerror(errno));
}

StDtype parse_export_dtype(const char* flag, const std::string& s) {
  const std::string l = lower(s);
  if (l == "f32" || l == "float32") return StDtype::F32;
  if (l == "bf16" || l == "bfloat16") return StDtype::BF16;
  fail(flag, " must be f32 or bf16 (got '", s, "')");
}

}  // namespace ratchet
