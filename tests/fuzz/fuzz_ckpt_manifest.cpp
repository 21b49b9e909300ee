// Format-3 checkpoints (ckpt/checkpoint_shards.h: state.h5 + per-rank
// shard_RRRRR.h5 + manifest.json) read by CheckpointReader with a fuzzed
// manifest and damaged files. A valid three-shard checkpoint of a tiny model
// is written once per process (the template); each input then picks one of:
//   0  its bytes are manifest.json, verbatim (the seeds are real manifests);
//   1  the template's manifest with JSON-level mutations: a value anywhere in
//      the tree replaced (huge, negative, fractional, wrong type), removed,
//      or an array element doubled;
//   2  the template's files damaged: a shard or state.h5 truncated, bits
//      flipped, appended to, deleted or swapped for another shard, and
//      (sometimes) the manifest's byte count made to agree, so that the
//      damage reaches the checksums, not only the size check.
// One fault at a time: the manifest or the files. The manifest's checksums
// are what protect the files' HDF5 headers from the HDF5 library's own
// parser (not ratchet's code, and not hardened: see h5_fuzz_writer.h); a
// manifest damaged so that it no longer lists them, together with damaged
// headers, is out of this target's reach.
// The rule: opening, verifying and reading either fail with ratchet::Error
// or return exactly the template's values (a damaged checkpoint read as a
// different one would be a silent wrong result: a trap, as a crash is).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_shards.h"
#include "core/error.h"
#include "core/json.h"
#include "fuzz_util.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace fs = std::filesystem;
using ratchet::FlatRanges;

namespace {

struct Template {
  std::map<std::string, std::string> files;  // name -> bytes (not the manifest)
  std::vector<std::string> names;            // state.h5 first, then the shards
  nlohmann::json manifest;
  std::vector<float> params, m, v;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), (std::streamsize)bytes.size());
}

// Three ranks writing interleaved ranges (as bucket-cut ZeRO shards do), rank
// 1 writing nothing: the reader must sort and tile them.
const Template& the_template() {
  static const Template t = [] {
    Template t;
    ratchet::CheckpointMeta meta;
    meta.model.num_layers = 1, meta.model.num_heads = 1, meta.model.channels = 4;
    meta.model.vocab_size = 8, meta.model.padded_vocab = 128, meta.model.max_seq_len = 4;
    meta.model.finalize(ratchet::kCheckpointNames);
    meta.step = 7;
    meta.adam_t = 7;
    meta.identity = {{"seed", "1"}};
    const size_t P = ratchet::ParamLayout(meta.model).total;
    for (size_t i = 0; i < P; i++) {
      t.params.push_back(0.001f * (float)i + 1.f);
      t.m.push_back(-0.5f * (float)i);
      t.v.push_back(1.f + 0.25f * (float)i);
    }
    const size_t a = P / 5, b = 2 * P / 5, c = 3 * P / 4;
    const std::vector<std::pair<int, FlatRanges>> layout = {
        {0, {{0, a}, {b, c}}}, {2, {{a, b}}}, {3, {{c, P}}}};
    const std::string dir = ratchet::fuzz::scratch_dir() + "/template";
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<ratchet::ShardFileInfo> shards;
    for (const auto& [rank, ranges] : layout) {
      std::vector<float> p, m, v;
      for (const auto& [lo, hi] : ranges) {
        p.insert(p.end(), t.params.begin() + lo, t.params.begin() + hi);
        m.insert(m.end(), t.m.begin() + lo, t.m.begin() + hi);
        v.insert(v.end(), t.v.begin() + lo, t.v.begin() + hi);
      }
      shards.push_back(ratchet::write_param_shard(dir, meta.step, rank, 4, P, ranges, p.data(),
                                                  m.data(), v.data()));
    }
    ratchet::write_sharded_state(dir, meta, shards);
    t.names.push_back("state.h5");
    for (const auto& s : shards) t.names.push_back(s.name);
    for (const auto& n : t.names) t.files[n] = slurp(dir + "/" + n);
    t.manifest = nlohmann::json::parse(slurp(dir + "/manifest.json"));
    // RATCHET_FUZZ_WRITE_SEED=path: the template's manifest as a mode-0 seed
    // (FuzzedDataProvider takes the mode from the input's last byte).
    if (const char* seed = std::getenv("RATCHET_FUZZ_WRITE_SEED"))
      spit(seed, t.manifest.dump(2) + std::string(1, '\0'));
    fs::remove_all(dir);
    return t;
  }();
  return t;
}

nlohmann::json fuzzed_value(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 11)) {
    case 0: return in.ConsumeIntegral<int64_t>();
    case 1: return in.ConsumeIntegral<uint64_t>();
    case 2: return in.ConsumeIntegralInRange<int64_t>(-3, 300);
    case 3: return in.ConsumeFloatingPoint<double>();  // 1e300, -0.5, ...
    case 4: return in.ConsumeProbability<double>() * 1e20;
    case 5: return in.ConsumeRandomLengthString(40);
    case 6: return in.ConsumeBool();
    case 7: return nullptr;
    case 8: return nlohmann::json::array();
    case 9: return nlohmann::json::object();
    case 10: return nlohmann::json::array({in.ConsumeIntegralInRange<int64_t>(-2, 3000),
                                           in.ConsumeIntegralInRange<int64_t>(-2, 3000)});
    default: return "shard_0000" + std::to_string(in.ConsumeIntegralInRange<int>(0, 9)) + ".h5";
  }
}

// A random walk from the root to a node, then one change there.
void mutate(FuzzedDataProvider& in, nlohmann::json& root) {
  nlohmann::json* parent = nullptr;
  nlohmann::json* node = &root;
  std::string key;
  size_t index = 0;
  while ((node->is_object() || node->is_array()) && !node->empty() && in.ConsumeBool()) {
    const size_t k = in.ConsumeIntegralInRange<size_t>(0, node->size() - 1);
    parent = node;
    if (node->is_object()) {
      auto it = node->begin();
      std::advance(it, k);
      key = it.key();
      node = &*it;
    } else {
      index = k;
      node = &(*node)[k];
    }
  }
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:  // remove it
      if (parent && parent->is_object()) parent->erase(key);
      else if (parent) parent->erase(index);
      return;
    case 1:  // doubled in its array
      if (parent && parent->is_array()) parent->push_back(nlohmann::json(*node));
      return;
    default:
      *node = fuzzed_value(in);
  }
}

// One damage to one of the files (by the template's name).
void damage(FuzzedDataProvider& in, const Template& t, std::map<std::string, std::string>& files,
            nlohmann::json& manifest) {
  const std::string& name = t.names[in.ConsumeIntegralInRange<size_t>(0, t.names.size() - 1)];
  std::string& f = files[name];
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      f.resize(in.ConsumeIntegralInRange<size_t>(0, f.size()));
      break;
    case 1:
    case 2: {  // flips (one to eight bits)
      const int n = in.ConsumeIntegralInRange<int>(1, 8);
      for (int i = 0; i < n && !f.empty(); i++)
        f[in.ConsumeIntegralInRange<size_t>(0, f.size() - 1)] ^=
            (char)(1u << in.ConsumeIntegralInRange<int>(0, 7));
      break;
    }
    case 3:
      f += in.ConsumeRandomLengthString(64);
      break;
    case 4:
      files.erase(name);
      return;
    default:  // another shard's (or state.h5's) bytes under this name
      f = t.files.at(t.names[in.ConsumeIntegralInRange<size_t>(0, t.names.size() - 1)]);
  }
  if (in.ConsumeBool() && manifest.contains("files") && manifest["files"].is_array())
    for (auto& e : manifest["files"])
      if (e.is_object() && e.contains("name") && e["name"] == name) e["bytes"] = f.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Template& t = the_template();
  // RATCHET_FUZZ_VERBOSE=1: what each input ended in (replaying a corpus file).
  static const bool verbose = std::getenv("RATCHET_FUZZ_VERBOSE") != nullptr;
  FuzzedDataProvider in(data, size);
  const int mode = in.ConsumeIntegralInRange<int>(0, 2);
  std::map<std::string, std::string> files = t.files;
  std::string manifest_text;
  if (mode == 0) {
    manifest_text = in.ConsumeRemainingBytesAsString();
  } else {
    nlohmann::json m = t.manifest;
    if (mode == 1) {
      const int changes = in.ConsumeIntegralInRange<int>(1, 4);
      for (int i = 0; i < changes; i++) mutate(in, m);
    } else {
      const int n = in.ConsumeIntegralInRange<int>(1, 3);
      for (int i = 0; i < n; i++) damage(in, t, files, m);
    }
    // Fuzzed strings may be invalid UTF-8, which dump() refuses to write.
    manifest_text = m.dump(in.ConsumeBool() ? 2 : -1, ' ', false,
                           nlohmann::json::error_handler_t::replace);
  }
  const std::string dir = ratchet::fuzz::scratch_dir() + "/ckpt";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [name, bytes] : files) spit(dir + "/" + name, bytes);
  spit(dir + "/manifest.json", manifest_text);

  try {
    const ratchet::CheckpointReader r(dir);
    r.verify();
    const ratchet::Checkpoint ck = ratchet::read_checkpoint_part(r, {});
    if (ck.params != t.params || ck.adam_m != t.m || ck.adam_v != t.v) __builtin_trap();
    // A rank's part: the moments of two ranges only, back to back.
    const size_t P = t.params.size();
    const FlatRanges mine = {{1, P / 3}, {P / 2, P - 1}};
    const ratchet::Checkpoint part = ratchet::read_checkpoint_part(r, mine);
    size_t at = 0;
    for (const auto& [lo, hi] : mine)
      for (size_t i = lo; i < hi; i++, at++)
        if (part.adam_m[at] != t.m[i] || part.adam_v[at] != t.v[i]) __builtin_trap();
    if (verbose) std::fprintf(stderr, "read: the template's values\n");
  } catch (const ratchet::Error& e) {
    if (verbose) std::fprintf(stderr, "Error: %s\n", e.what());
  }
  return 0;
}
