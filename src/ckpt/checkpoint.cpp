#include "ckpt/checkpoint.h"

#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "core/fault.h"
#include "data/h5_util.h"
#include "model/param_layout.h"

namespace ratchet {

namespace ckpt_io {

const char* kStateFile = "state.h5";
const char* kTensorNames[3] = {"params", "adam_m", "adam_v"};
const char* kMoeBiasDataset = "moe_selection_bias";

uint32_t crc_of(const float* data, size_t count) { return crc_update(0, data, count); }

uint32_t crc_update(uint32_t crc0, const void* data, size_t count_floats) {
  return crc_bytes(crc0, data, count_floats * sizeof(float));
}

uint32_t crc_bytes(uint32_t crc0, const void* data, size_t bytes) {
  // zlib's crc32 takes 32-bit lengths: feed it in 1 GiB pieces.
  uLong crc = crc0;
  const Bytef* p = (const Bytef*)data;
  size_t left = bytes;
  while (left) {
    uInt n = (uInt)std::min<size_t>(left, 1u << 30);
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return (uint32_t)crc;
}

uint32_t file_crc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path);
  std::vector<char> buf(1 << 16);
  uint32_t crc = 0;
  while (in) {
    in.read(buf.data(), buf.size());
    crc = crc_bytes(crc, buf.data(), (size_t)in.gcount());
  }
  return crc;
}

uint32_t crc_of(const std::vector<float>& v) { return crc_of(v.data(), v.size()); }

void fsync_path(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open ", path, " to fsync: ", std::strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) fail("fsync of ", path, " failed: ", std::strerror(err));
}

// ---- attribute helpers -------------------------------------------------------
void put_attr(hid_t obj, const char* name, hid_t type, const void* v, const std::string& ctx) {
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR), ctx), H5Sclose);
  H5Handle a(H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), ctx,
                      ": attribute ", name),
             H5Aclose);
  H5_CHECK(H5Awrite(a, type, v), ctx, ": attribute ", name);
}
void put_i64(hid_t o, const char* n, int64_t v, const std::string& c) {
  put_attr(o, n, H5T_NATIVE_INT64, &v, c);
}
void put_u64(hid_t o, const char* n, uint64_t v, const std::string& c) {
  put_attr(o, n, H5T_NATIVE_UINT64, &v, c);
}
void put_f64(hid_t o, const char* n, double v, const std::string& c) {
  put_attr(o, n, H5T_NATIVE_DOUBLE, &v, c);
}
void put_str(hid_t o, const char* n, const std::string& v, const std::string& c) {
  H5Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, std::max<size_t>(1, v.size()));
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  put_attr(o, n, t, buf.data(), c);
}

// Every attribute read here is required: absent means the file is damaged or
// not a checkpoint.
template <typename T>
T required(std::optional<T> v, const char* name, const std::string& ctx) {
  if (!v) fail(ctx, ": attribute '", name, "' is missing");
  return std::move(*v);
}
int64_t get_i64(hid_t o, const char* n, const std::string& c) {
  return required(h5_int_attr(o, n, c, ""), n, c);
}
// An int attribute: a value beyond int would be cut short by a cast (2^32 + 1
// layers read as 1), so it is refused by name instead.
int get_int(hid_t o, const char* n, const std::string& c) {
  const int64_t v = get_i64(o, n, c);
  if (v < INT32_MIN || v > INT32_MAX) fail(c, ": attribute '", n, "' = ", v, " is out of range");
  return (int)v;
}
uint64_t get_u64(hid_t o, const char* n, const std::string& c) {
  return required(h5_uint_attr(o, n, c, ""), n, c);
}
double get_f64(hid_t o, const char* n, const std::string& c) {
  return required(h5_double_attr(o, n, c, ""), n, c);
}
std::string get_str(hid_t o, const char* n, const std::string& c) {
  return required(h5_string_attr(o, n, c, ""), n, c);
}

// Per-layer 0/1 flags as a string of '0' and '1' ("" for none).
std::string per_layer_flags(const std::vector<uint8_t>& v) {
  std::string s;
  for (uint8_t x : v) s += x ? '1' : '0';
  return s;
}
std::vector<uint8_t> parse_per_layer_flags(const std::string& s, const char* n,
                                           const std::string& ctx) {
  std::vector<uint8_t> v;
  for (char ch : s) {
    if (ch != '0' && ch != '1') fail(ctx, ": attribute ", n, " must be a string of 0 and 1");
    v.push_back(ch == '1');
  }
  return v;
}

// The model fields beyond GPT-2's six (issue 17). Written always; read when
// present: a checkpoint without `arch` predates them and is a GPT-2.
void put_model_extras(hid_t f, const GPTConfig& c, const std::string& ctx) {
  put_str(f, "arch", arch_name(c.arch), ctx);
  put_i64(f, "num_kv_heads", c.kv_heads(), ctx);
  put_i64(f, "ffn_hidden", c.ffn(), ctx);
  put_i64(f, "tied_embeddings", c.tied_embeddings ? 1 : 0, ctx);
  put_f64(f, "norm_eps", c.norm_eps, ctx);
  put_f64(f, "rope_theta", c.rope_theta, ctx);
  put_f64(f, "rope_factor", c.rope_factor, ctx);
  put_f64(f, "rope_low_freq_factor", c.rope_low_freq_factor, ctx);
  put_f64(f, "rope_high_freq_factor", c.rope_high_freq_factor, ctx);
  put_i64(f, "rope_original_max_pos", c.rope_original_max_pos, ctx);
  if (c.arch != Arch::llama) return;
  // Issue 38's family fields; a checkpoint without `family` predates them (a Llama).
  put_str(f, "family", family_name(c.family), ctx);
  put_i64(f, "head_dim", c.head_dim, ctx);
  put_i64(f, "qkv_bias", c.qkv_bias ? 1 : 0, ctx);
  put_i64(f, "qk_norm", (int)c.qk_norm, ctx);
  put_i64(f, "norm_placement", (int)c.norm_placement, ctx);
  put_i64(f, "norm_unit_offset", c.norm_unit_offset ? 1 : 0, ctx);
  put_i64(f, "embed_scale", c.embed_scale ? 1 : 0, ctx);
  put_f64(f, "attn_scale", c.attn_scale, ctx);
  put_i64(f, "mlp_act", (int)c.mlp_act, ctx);
  put_f64(f, "attn_softcap", c.attn_softcap, ctx);
  put_f64(f, "final_softcap", c.final_softcap, ctx);
  put_i64(f, "sliding_window", c.sliding_window, ctx);
  put_str(f, "layer_sliding", per_layer_flags(c.layer_sliding), ctx);
  put_str(f, "layer_rope", per_layer_flags(c.layer_rope), ctx);
  put_f64(f, "rope_local_theta", c.rope_local_theta, ctx);
  // Issue 39's Mixture-of-Experts fields; a checkpoint without num_experts
  // predates them (a dense model). mlp_only_layers: "3,7" ("" none).
  put_i64(f, "num_experts", c.num_experts, ctx);
  put_i64(f, "experts_per_tok", c.experts_per_tok, ctx);
  put_i64(f, "moe_ffn_hidden", c.moe_ffn_hidden, ctx);
  put_i64(f, "norm_topk_prob", c.norm_topk_prob ? 1 : 0, ctx);
  put_i64(f, "decoder_sparse_step", c.decoder_sparse_step, ctx);
  std::string only;
  for (int l : c.mlp_only_layers) only += (only.empty() ? "" : ",") + std::to_string(l);
  put_str(f, "mlp_only_layers", only, ctx);
  put_f64(f, "router_aux_loss_coef", c.router_aux_loss_coef, ctx);
  put_f64(f, "clip_qkv", c.clip_qkv, ctx);
  // DeepSeek-V3 routing (docs/moe.md); absent in older checkpoints: softmax, 1.
  put_str(f, "scoring_func", c.moe_sigmoid ? "sigmoid" : "softmax", ctx);
  put_f64(f, "routed_scaling_factor", c.routed_scaling_factor, ctx);
  // Shared experts (absent in older checkpoints: none).
  put_i64(f, "n_shared_experts", c.n_shared_experts, ctx);
  // Qwen2-MoE's gated shared expert: written only where the model has one,
  // so that every other model's state.h5 keeps its attributes (absent: none).
  if (c.shared_expert_ffn > 0) put_i64(f, "shared_expert_ffn", c.shared_expert_ffn, ctx);
  // Group-limited selection; absent in older checkpoints: 1 / 1 (no groups).
  put_i64(f, "n_group", c.n_group, ctx);
  put_i64(f, "topk_group", c.topk_group, ctx);
}
void get_model_extras(hid_t f, GPTConfig* c, const std::string& ctx) {
  auto arch = h5_string_attr(f, "arch", ctx, "");
  if (!arch) return;  // an older (GPT-2) checkpoint
  try {
    c->arch = parse_arch(*arch, "attribute arch");
  } catch (const Error& e) {
    fail(ctx, ": ", e.what());
  }
  c->num_kv_heads = get_int(f, "num_kv_heads", ctx);
  c->ffn_hidden = get_int(f, "ffn_hidden", ctx);
  c->tied_embeddings = get_i64(f, "tied_embeddings", ctx) != 0;
  // float -> double -> float is exact, so a resumed config compares equal.
  c->norm_eps = (float)get_f64(f, "norm_eps", ctx);
  c->rope_theta = (float)get_f64(f, "rope_theta", ctx);
  c->rope_factor = (float)get_f64(f, "rope_factor", ctx);
  c->rope_low_freq_factor = (float)get_f64(f, "rope_low_freq_factor", ctx);
  c->rope_high_freq_factor = (float)get_f64(f, "rope_high_freq_factor", ctx);
  c->rope_original_max_pos = get_int(f, "rope_original_max_pos", ctx);
  auto family = h5_string_attr(f, "family", ctx, "");
  if (!family) return;  // before issue 38: a Llama
  if (!parse_family(*family, &c->family))
    fail(ctx, ": attribute family is '", *family, "', which this build does not know (a newer "
         "ratchet wrote it?)");
  const auto enum_attr = [&](const char* n, int last) {
    const int v = get_int(f, n, ctx);
    if (v < 0 || v > last) fail(ctx, ": attribute ", n, " is ", v, ", not 0..", last);
    return v;
  };
  c->head_dim = get_int(f, "head_dim", ctx);
  c->qkv_bias = get_i64(f, "qkv_bias", ctx) != 0;
  c->qk_norm = (QkNorm)enum_attr("qk_norm", (int)QkNorm::full_width);
  c->norm_placement = (NormPlacement)enum_attr("norm_placement", (int)NormPlacement::sandwich);
  c->norm_unit_offset = get_i64(f, "norm_unit_offset", ctx) != 0;
  c->embed_scale = get_i64(f, "embed_scale", ctx) != 0;
  c->attn_scale = (float)get_f64(f, "attn_scale", ctx);
  c->mlp_act = (MlpAct)enum_attr("mlp_act", (int)MlpAct::gelu_tanh);
  c->attn_softcap = (float)get_f64(f, "attn_softcap", ctx);
  c->final_softcap = (float)get_f64(f, "final_softcap", ctx);
  c->sliding_window = get_int(f, "sliding_window", ctx);
  c->layer_sliding = parse_per_layer_flags(get_str(f, "layer_sliding", ctx), "layer_sliding", ctx);
  c->layer_rope = parse_per_layer_flags(get_str(f, "layer_rope", ctx), "layer_rope", ctx);
  c->rope_local_theta = (float)get_f64(f, "rope_local_theta", ctx);
  if (!h5_int_attr(f, "num_experts", ctx, "")) return;  // before issue 39: dense
  c->num_experts = get_int(f, "num_experts", ctx);
  c->experts_per_tok = get_int(f, "experts_per_tok", ctx);
  c->moe_ffn_hidden = get_int(f, "moe_ffn_hidden", ctx);
  c->norm_topk_prob = get_i64(f, "norm_topk_prob", ctx) != 0;
  c->decoder_sparse_step = get_int(f, "decoder_sparse_step", ctx);
  c->mlp_only_layers.clear();
  const std::string only = get_str(f, "mlp_only_layers", ctx);
  for (size_t at = 0; at < only.size();) {
    const size_t comma = std::min(only.find(',', at), only.size());
    const std::string item = only.substr(at, comma - at);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 9)
      fail(ctx, ": attribute mlp_only_layers is '", only, "', not a comma-separated list of layers");
    c->mlp_only_layers.push_back(std::stoi(item));
    at = comma + 1;
  }
  c->router_aux_loss_coef = (float)get_f64(f, "router_aux_loss_coef", ctx);
  c->clip_qkv = (float)get_f64(f, "clip_qkv", ctx);
  if (auto sf = h5_string_attr(f, "scoring_func", ctx, "")) {
    if (*sf != "softmax" && *sf != "sigmoid")
      fail(ctx, ": attribute scoring_func is '", *sf, "', not softmax or sigmoid");
    c->moe_sigmoid = *sf == "sigmoid";
    c->routed_scaling_factor = (float)get_f64(f, "routed_scaling_factor", ctx);
  }
  if (h5_int_attr(f, "n_shared_experts", ctx, "")) c->n_shared_experts = get_int(f, "n_shared_experts", ctx);
  if (h5_int_attr(f, "shared_expert_ffn", ctx, "")) c->shared_expert_ffn = get_int(f, "shared_expert_ffn", ctx);
  if (h5_int_attr(f, "n_group", ctx, "")) {
    c->n_group = get_int(f, "n_group", ctx);
    c->topk_group = get_int(f, "topk_group", ctx);
  }
}

}  // namespace ckpt_io

using namespace ckpt_io;

std::string to_ini(const std::map<std::string, std::string>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += k + " = " + v + "\n";
  return s;
}

std::map<std::string, std::string> from_ini(const std::string& text) {
  std::map<std::string, std::string> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find(" = ");
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return m;
}

static std::string counters_to_ini(const std::map<std::string, double>& c) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : c) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    m[k] = buf;
  }
  return to_ini(m);
}

// Fails before anything is written when the file cannot fit: free space on
// the file system, or the process's file-size limit (ulimit -f, quotas).
void ckpt_io::check_room(const std::string& dir, uint64_t need) {
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) == 0) {
    const uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
    if (avail < need)
      fail("not enough space in ", dir, ": the checkpoint needs ", need / 1e6, " MB, ",
           avail / 1e6, " MB are free (disk full?)");
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
    fail("the checkpoint needs a ", need / 1e6, " MB file but the file-size limit is ",
         rl.rlim_cur / 1e6, " MB (ulimit -f)");
}

// The MoE selection bias (CheckpointMeta::moe_bias): a small (L·E) dataset
// with its crc32, written whatever the format.
static void write_moe_bias(hid_t f, const CheckpointMeta& m, const std::string& ctx) {
  RATCHET_ASSERT(m.moe_bias.size() == (size_t)m.model.num_layers * m.model.num_experts);
  hsize_t dims[1] = {m.moe_bias.size()};
  H5Handle space(H5_CHECK(H5Screate_simple(1, dims, nullptr), ctx), H5Sclose);
  H5Handle d(H5_CHECK(H5Dcreate2(f, kMoeBiasDataset, H5T_IEEE_F32LE, space, H5P_DEFAULT,
                                 H5P_DEFAULT, H5P_DEFAULT),
                      ctx, ": /", kMoeBiasDataset),
             H5Dclose);
  H5_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.moe_bias.data()), ctx,
           ": /", kMoeBiasDataset, " (disk full?)");
  put_u64(d, "crc32", crc_of(m.moe_bias), ctx);
}

// Reads /moe_selection_bias when present (then the model has the option on):
// (L·E) finite values under their crc32. Absent: left empty.
static void read_moe_bias(hid_t f, CheckpointMeta* m, const std::string& ctx) {
  if (H5Lexists(f, kMoeBiasDataset, H5P_DEFAULT) <= 0) return;
  const size_t n = (size_t)m->model.num_layers * m->model.num_experts;
  if (n == 0) fail(ctx, ": /", kMoeBiasDataset, " is present but the model has no experts");
  H5Handle d(H5_CHECK(H5Dopen2(f, kMoeBiasDataset, H5P_DEFAULT), ctx, ": /", kMoeBiasDataset),
             H5Dclose);
  H5Handle space(H5_CHECK(H5Dget_space(d), ctx), H5Sclose);
  hsize_t dims[1] = {0};
  if (H5Sget_simple_extent_ndims(space) != 1 ||
      H5Sget_simple_extent_dims(space, dims, nullptr) != 1 || dims[0] != n)
    fail(ctx, ": /", kMoeBiasDataset, " has ", dims[0], " elements, the model needs ", n,
         " (num_layers x num_experts)");
  m->moe_bias.resize(n);
  H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m->moe_bias.data()), ctx,
           ": /", kMoeBiasDataset, " is unreadable (truncated?)");
  const uint64_t want = get_u64(d, "crc32", ctx);
  const uint32_t got = crc_of(m->moe_bias);
  if (got != want)
    fail(ctx, ": /", kMoeBiasDataset, " fails its checksum (crc32 ", got, ", recorded ", want,
         "): the file is corrupted");
  for (float v : m->moe_bias)
    if (!std::isfinite(v)) fail(ctx, ": /", kMoeBiasDataset, " holds a non-finite value ", v);
  m->model.moe_selection_bias = true;
}

void write_checkpoint_files(const std::string& dir, const Checkpoint& ck) {
  h5_init();
  const std::string path = dir + "/" + kStateFile;
  const std::string ctx = "writing checkpoint " + path;
  const size_t P = ParamLayout(ck.meta.model).total;
  // Format 3 (param_shards > 0): state.h5 holds the metadata only; the
  // tensors are in the ranks' shard files (checkpoint_shards.h), whose
  // manifest write_sharded_manifest() writes. Otherwise format 1 or 2.
  const bool v3 = ck.meta.param_shards > 0;
  const int shards = v3 ? 0 : ck.meta.optimizer_shards;
  const int ntensors = v3 ? 0 : shards > 0 ? 1 : 3;  // sharded: the moments are in the shard files
  RATCHET_ASSERT(v3 || (ck.params.size() == P &&
                        (shards > 0 || (ck.adam_m.size() == P && ck.adam_v.size() == P))));
  check_room(dir, ntensors * P * sizeof(float) + (1 << 20));  // tensors + metadata headroom
  uint32_t crcs[3] = {0, 0, 0};
  {
    H5Handle f(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), ctx),
               H5Fclose);
    const std::vector<float>* tensors[3] = {&ck.params, &ck.adam_m, &ck.adam_v};
    for (int i = 0; i < ntensors; i++) {
      hsize_t dims[1] = {P};
      H5Handle space(H5_CHECK(H5Screate_simple(1, dims, nullptr), ctx), H5Sclose);
      H5Handle d(H5_CHECK(H5Dcreate2(f, kTensorNames[i], H5T_IEEE_F32LE, space, H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT),
                          ctx, ": /", kTensorNames[i]),
                 H5Dclose);
      H5_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensors[i]->data()),
               ctx, ": /", kTensorNames[i], " (disk full?)");
      crcs[i] = crc_of(*tensors[i]);
      put_u64(d, "crc32", crcs[i], ctx);
      if (i == 0) fault_point("ckpt-mid-write");
    }
    const CheckpointMeta& m = ck.meta;
    if (!m.moe_bias.empty()) write_moe_bias(f, m, ctx);
    put_str(f, "format", "ratchet-checkpoint", ctx);
    put_i64(f, "format_version", v3 ? 3 : shards > 0 ? 2 : 1, ctx);
    if (shards > 0) put_i64(f, "optimizer_shards", shards, ctx);
    if (v3) put_i64(f, "param_shards", ck.meta.param_shards, ctx);
    put_i64(f, "step", m.step, ctx);
    put_i64(f, "adam_t", m.adam_t, ctx);
    put_u64(f, "loader_epoch", m.cursor.epoch, ctx);
    put_u64(f, "loader_position", m.cursor.position, ctx);
    // A mixture's rows per source (data/mixture.h), "k0,k1,..."; absent for one source.
    if (!m.cursor.source_rows.empty()) {
      std::string rows;
      for (uint64_t k : m.cursor.source_rows) rows += (rows.empty() ? "" : ",") + std::to_string(k);
      put_str(f, "loader_source_rows", rows, ctx);
    }
    put_f64(f, "best_val_loss", m.best_val_loss, ctx);
    put_i64(f, "best_step", m.best_step, ctx);
    put_i64(f, "num_layers", m.model.num_layers, ctx);
    put_i64(f, "num_heads", m.model.num_heads, ctx);
    put_i64(f, "channels", m.model.channels, ctx);
    put_i64(f, "vocab_size", m.model.vocab_size, ctx);
    put_i64(f, "padded_vocab", m.model.padded_vocab, ctx);
    put_i64(f, "max_seq_len", m.model.max_seq_len, ctx);
    put_model_extras(f, m.model, ctx);
    put_str(f, "run_identity", to_ini(m.identity), ctx);
    put_str(f, "run_settings", to_ini(m.settings), ctx);
    put_str(f, "counters", counters_to_ini(m.counters), ctx);
    H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL), ctx, " (disk full?)");
  }
  fsync_path(path);
  if (v3) return;

  const std::string mpath = dir + "/manifest.json";
  {
    std::ofstream mf(mpath);
    char created[64];
    std::time_t now = std::time(nullptr);
    std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    OrderedJson m;
    m["format"] = "ratchet-checkpoint";
    m["format_version"] = shards > 0 ? 2 : 1;
    m["step"] = ck.meta.step;
    m["created"] = created;
    m["num_params"] = P;
    OrderedJson state = {{"name", kStateFile}, {"datasets", OrderedJson::object()}};
    for (int i = 0; i < ntensors; i++) state["datasets"][kTensorNames[i]] = {{"crc32", crcs[i]}};
    m["files"] = OrderedJson::array({state});
    // Shard files carry their own crc32 attributes (each rank wrote its own).
    for (int r = 0; r < shards; r++)
      m["files"].push_back({{"name", optimizer_shard_name(r)},
                            {"shard", r},
                            {"datasets", OrderedJson::array({"adam_m", "adam_v"})}});
    if (shards > 0) m["optimizer_shards"] = shards;
    mf << m.dump(2) << "\n";
    mf.flush();
    if (!mf) fail("cannot write ", mpath, " (disk full?)");
  }
  fsync_path(mpath);
}

std::string optimizer_shard_name(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "optim_shard_%05d.h5", index);
  return buf;
}

void write_optimizer_shard(const std::string& dir, int64_t step, int index, int count, size_t P,
                           size_t lo, size_t hi, const float* m, const float* v) {
  h5_init();
  RATCHET_ASSERT(lo <= hi && hi <= P && index >= 0 && index < count);
  const std::string path = dir + "/" + optimizer_shard_name(index);
  const std::string ctx = "writing checkpoint shard " + path;
  check_room(dir, 2 * (hi - lo) * sizeof(float) + (1 << 16));
  {
    H5Handle f(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), ctx),
               H5Fclose);
    const float* data[2] = {m, v};
    for (int i = 0; i < 2; i++) {
      const char* name = kTensorNames[1 + i];
      hsize_t dims[1] = {hi - lo};
      H5Handle space(H5_CHECK(H5Screate_simple(1, dims, nullptr), ctx), H5Sclose);
      H5Handle d(H5_CHECK(H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                     H5P_DEFAULT),
                          ctx, ": /", name),
                 H5Dclose);
      if (hi > lo)
        H5_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data[i]), ctx,
                 ": /", name, " (disk full?)");
      put_u64(d, "crc32", crc_of(data[i], hi - lo), ctx);
    }
    put_str(f, "format", "ratchet-optimizer-shard", ctx);
    put_i64(f, "step", step, ctx);
    put_i64(f, "shard", index, ctx);
    put_i64(f, "shards", count, ctx);
    put_u64(f, "num_params", P, ctx);
    put_u64(f, "lo", lo, ctx);
    put_u64(f, "hi", hi, ctx);
    H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL), ctx, " (disk full?)");
  }
  fsync_path(path);
}

// Reassembles the full (P) moments from the shard files of a sharded checkpoint.
static void read_optimizer_shards(const std::string& dir, Checkpoint* ck) {
  const size_t P = ck->params.size();
  const int n = ck->meta.optimizer_shards;
  ck->adam_m.assign(P, 0.0f);
  ck->adam_v.assign(P, 0.0f);
  H5Handle fapl = h5_fapl_no_locking();
  uint64_t next = 0;  // the shards must tile [0, P) in order
  for (int r = 0; r < n; r++) {
    const std::string path = dir + "/" + optimizer_shard_name(r);
    const std::string ctx = "checkpoint shard " + path;
    H5Handle f(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open ", ctx,
                        " (one of ", n, " optimizer shards)"),
               H5Fclose);
    if (get_str(f, "format", ctx) != "ratchet-optimizer-shard")
      fail(ctx, " is not an optimizer shard (format attribute)");
    const int64_t step = get_i64(f, "step", ctx);
    const int64_t shard = get_i64(f, "shard", ctx);
    const int64_t shards = get_i64(f, "shards", ctx);
    const uint64_t np = get_u64(f, "num_params", ctx);
    const uint64_t lo = get_u64(f, "lo", ctx);
    const uint64_t hi = get_u64(f, "hi", ctx);
    if (step != ck->meta.step || shard != r || shards != n || np != P)
      fail(ctx, " does not belong to this checkpoint (step ", step, ", shard ", shard, " of ",
           shards, ", ", np, " parameters; expected step ", ck->meta.step, ", shard ", r, " of ",
           n, ", ", P, ")");
    if (lo != next || hi < lo || hi > P)
      fail(ctx, " covers [", lo, ", ", hi, ") but the next range starts at ", next);
    next = hi;
    std::vector<float>* full[2] = {&ck->adam_m, &ck->adam_v};
    for (int i = 0; i < 2; i++) {
      const char* name = kTensorNames[1 + i];
      H5Handle d(H5_CHECK(H5Dopen2(f, name, H5P_DEFAULT), ctx, ": /", name), H5Dclose);
      H5Handle space(H5_CHECK(H5Dget_space(d), ctx), H5Sclose);
      hsize_t dims[1] = {0};
      if (H5Sget_simple_extent_ndims(space) != 1 ||
          H5Sget_simple_extent_dims(space, dims, nullptr) != 1 || dims[0] != hi - lo)
        fail(ctx, ": /", name, " has ", dims[0], " elements, the range needs ", hi - lo);
      float* dst = full[i]->data() + lo;
      if (hi > lo)
        H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst), ctx, ": /",
                 name, " is unreadable (truncated?)");
      const uint64_t want = get_u64(d, "crc32", ctx);
      const uint32_t got = crc_of(dst, hi - lo);
      if (got != want)
        fail(ctx, ": /", name, " fails its checksum (crc32 ", got, ", recorded ", want,
             "): the file is corrupted");
    }
  }
  if (next != P)
    fail("checkpoint ", dir, ": the optimizer shards cover [0, ", next, ") of ", P,
         " parameters");
}

// A path that holds no state.h5 is said for what it is, not with HDF5's
// "unable to open file" (issue 25): a whole --ckpt-dir, or not a checkpoint.
static void check_is_checkpoint(const std::string& dir, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return;
  if (fs::exists(path, ec))
    fail(path, " is not a regular file: ", dir, " is not a ratchet checkpoint");
  if (fs::is_directory(dir, ec)) {
    std::string newest;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step_", 0) == 0 && fs::exists(e.path() / kStateFile, ec) && n > newest) newest = n;
    }
    if (!newest.empty() || fs::exists(fs::path(dir) / "latest", ec))
      fail(dir, " is a checkpoint directory (--ckpt-dir), not one checkpoint: give one of its "
           "step_NNNNNNNN directories", newest.empty() ? "" : " (the newest: " +
           (fs::path(dir) / newest).string() + ")");
  }
  fail(dir, " is not a ratchet checkpoint: it holds no ", kStateFile,
       " (a checkpoint is a step_NNNNNNNN directory of a --ckpt-dir)");
}

// Format 3's manifest lists state.h5 with its size and a crc32 of the whole
// file: both are checked BEFORE the HDF5 library parses it, so a damaged
// state.h5 is an Error naming it, never the library reading a corrupted
// header (its parser is not hardened: a flipped bit in an attribute's
// header read past a heap buffer in libhdf5 1.10, found by
// tests/fuzz/fuzz_ckpt_manifest.cpp). A manifest that does not parse, or
// lists no such entry (formats 1 and 2), is left to the later checks.
static void check_state_against_manifest(const std::string& dir, const std::string& path) {
  std::ifstream in(dir + "/manifest.json");
  if (!in) return;
  const nlohmann::json m = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("files") || !m["files"].is_array()) return;
  for (const auto& f : m["files"]) {
    if (!f.is_object() || !f.contains("name") || f["name"] != kStateFile ||
        !f.contains("bytes") || !f.contains("crc32"))
      continue;
    const std::string ctx = "checkpoint manifest " + dir + "/manifest.json: the " +
                            kStateFile + " entry";
    const uint64_t bytes = json_uint(f, "bytes", UINT64_MAX, ctx);
    const uint64_t crc = json_uint(f, "crc32", UINT32_MAX, ctx);
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec || size != bytes)
      fail("checkpoint ", path, " has ", ec ? 0 : size, " bytes, the manifest says ", bytes,
           " (truncated or replaced): use an earlier checkpoint");
    const uint32_t got = file_crc(path);
    if (got != crc)
      fail("checkpoint ", path, " fails its checksum (crc32 ", got, ", manifest ", crc,
           "): the file is corrupted; use an earlier checkpoint");
  }
}

CheckpointMeta read_checkpoint_meta(const std::string& dir) {
  h5_init();
  const std::string path = dir + "/" + kStateFile;
  const std::string ctx = "checkpoint " + path;
  check_is_checkpoint(dir, path);
  check_state_against_manifest(dir, path);
  H5Handle fapl = h5_fapl_no_locking();
  H5Handle f(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open ", ctx),
             H5Fclose);
  if (get_str(f, "format", ctx) != "ratchet-checkpoint")
    fail(ctx, " is not a ratchet checkpoint (format attribute)");
  const int64_t ver = get_i64(f, "format_version", ctx);
  if (ver > kCkptFormatVersion)
    fail(ctx, " has format_version ", ver, ", newer than this ratchet reads (",
         kCkptFormatVersion, "): use a newer ratchet to resume it");
  if (ver < 1) fail(ctx, " has an invalid format_version ", ver);
  CheckpointMeta m;
  m.step = get_i64(f, "step", ctx);
  m.adam_t = get_int(f, "adam_t", ctx);
  m.cursor.epoch = get_u64(f, "loader_epoch", ctx);
  m.cursor.position = get_u64(f, "loader_position", ctx);
  if (auto rows = h5_string_attr(f, "loader_source_rows", ctx, "")) {
    std::istringstream in(*rows);
    std::string k;
    while (std::getline(in, k, ',')) {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || errno || k[0] == '-')
        fail(ctx, ": loader_source_rows '", *rows, "' is not a list of row counts");
      m.cursor.source_rows.push_back(v);
    }
  }
  m.best_val_loss = get_f64(f, "best_val_loss", ctx);
  m.best_step = get_i64(f, "best_step", ctx);
  m.model.num_layers = get_int(f, "num_layers", ctx);
  m.model.num_heads = get_int(f, "num_heads", ctx);
  m.model.channels = get_int(f, "channels", ctx);
  m.model.vocab_size = get_int(f, "vocab_size", ctx);
  m.model.padded_vocab = get_int(f, "padded_vocab", ctx);
  m.model.max_seq_len = get_int(f, "max_seq_len", ctx);
  get_model_extras(f, &m.model, ctx);
  read_moe_bias(f, &m, ctx);  // before finalize: it sets model.moe_selection_bias
  try {
    m.model.finalize(kCheckpointNames);
  } catch (const Error& e) {
    fail(ctx, " has an invalid model shape: ", e.what());
  }
  // Written only for a sharded checkpoint: absent means unsharded.
  if (auto n = h5_int_attr(f, "optimizer_shards", ctx, "")) m.optimizer_shards = (int)*n;
  if (m.optimizer_shards < 0) fail(ctx, " has an invalid optimizer_shards ", m.optimizer_shards);
  // Format 3: the number of per-rank shard files (checkpoint_shards.h).
  if (auto n = h5_int_attr(f, "param_shards", ctx, "")) {
    if (*n < 1 || *n > (1 << 24)) fail(ctx, " has an invalid param_shards ", *n);
    m.param_shards = (int)*n;
  }
  if ((ver == 3) != (m.param_shards > 0))
    fail(ctx, ": format_version ", ver, " but ", m.param_shards > 0 ? "" : "no ",
         "param_shards attribute: the file is damaged");
  m.identity = from_ini(get_str(f, "run_identity", ctx));
  m.settings = from_ini(get_str(f, "run_settings", ctx));
  for (const auto& [k, v] : from_ini(get_str(f, "counters", ctx))) {
    char* end = nullptr;
    m.counters[k] = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') fail(ctx, ": counter ", k, " = '", v, "' is not a number");
  }
  return m;
}

Checkpoint read_checkpoint(const std::string& dir) {
  Checkpoint ck;
  ck.meta = read_checkpoint_meta(dir);
  if (ck.meta.param_shards > 0) {  // format 3: assembled from the shards, verified first
    CheckpointReader r(dir);
    r.verify();
    Checkpoint whole = read_checkpoint_part(r, {});
    // Whole tensors now: written back (write_checkpoint_files), it is format 1.
    whole.meta.param_shards = 0;
    return whole;
  }
  const std::string path = dir + "/" + kStateFile;
  const std::string ctx = "checkpoint " + path;
  const size_t P = ParamLayout(ck.meta.model).total;
  H5Handle fapl = h5_fapl_no_locking();
  H5Handle f(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open ", ctx),
             H5Fclose);
  std::vector<float>* tensors[3] = {&ck.params, &ck.adam_m, &ck.adam_v};
  const int ntensors = ck.meta.optimizer_shards > 0 ? 1 : 3;
  for (int i = 0; i < ntensors; i++) {
    H5Handle d(H5_CHECK(H5Dopen2(f, kTensorNames[i], H5P_DEFAULT), ctx, ": /", kTensorNames[i]),
               H5Dclose);
    H5Handle space(H5_CHECK(H5Dget_space(d), ctx), H5Sclose);
    hsize_t dims[1] = {0};
    if (H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, dims, nullptr) != 1 ||
        dims[0] != P)
      fail(ctx, ": /", kTensorNames[i], " has ", dims[0], " elements, the model needs ", P);
    tensors[i]->resize(P);
    H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensors[i]->data()),
             ctx, ": /", kTensorNames[i], " is unreadable (truncated?)");
    const uint64_t want = get_u64(d, "crc32", ctx);
    const uint32_t got = crc_of(*tensors[i]);
    if (got != want)
      fail(ctx, ": /", kTensorNames[i], " fails its checksum (crc32 ", got, ", recorded ", want,
           "): the file is corrupted");
  }
  if (ck.meta.optimizer_shards > 0) read_optimizer_shards(dir, &ck);
  // Checksums only say the bytes are as written: weights saved from a diverged
  // run (before issue 25 they were) are refused too, naming the tensor, so
  // that verify calls them BAD and a resume falls back to an earlier one.
  std::string bad = first_non_finite(ParamLayout(ck.meta.model), ck.params);
  for (int i = 1; i < 3 && bad.empty(); i++)
    for (size_t k = 0; k < tensors[i]->size(); k++)
      if (!std::isfinite((*tensors[i])[k])) {
        bad = std::string("/") + kTensorNames[i] + " holds " + std::to_string((*tensors[i])[k]) +
              " at element " + std::to_string(k);
        break;
      }
  if (!bad.empty())
    fail(ctx, ": ", bad, ": the weights are not finite (saved after the run diverged); not a "
         "usable checkpoint");
  return ck;
}

}  // namespace ratchet
