#include "interop/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/json.h"
#include "interop/atomic_write.h"

namespace ratchet {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference reader's limit (100 MB)

bool host_is_little_endian() {
  const uint16_t one = 1;
  uint8_t b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

bool parse_dtype(const std::string& s, StDtype* d) {
  if (s == "F32") *d = StDtype::F32;
  else if (s == "BF16") *d = StDtype::BF16;
  else if (s == "F16") *d = StDtype::F16;
  else return false;
  return true;
}

// One header entry, checked field by field; `where` is "file: tensor 'name'".
StTensor parse_entry(const std::string& name, const nlohmann::json& e, const std::string& where) {
  StTensor t;
  t.name = name;
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    fail(where, ": header entry must be an object with dtype, shape and data_offsets");
  if (!e["dtype"].is_string()) fail(where, ": dtype is not a string");
  const std::string dt = e["dtype"].get<std::string>();
  if (!parse_dtype(dt, &t.dtype))
    fail(where, ": unsupported dtype ", dt, " (ratchet reads F32, BF16 and F16): convert the "
         "checkpoint to one of them, e.g. torch_dtype float32 or bfloat16");
  if (!e["shape"].is_array()) fail(where, ": shape is not an array");
  for (const auto& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      fail(where, ": shape ", e["shape"].dump(), " has a dimension that is not a non-negative integer");
    t.shape.push_back(d.get<int64_t>());
  }
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(where, ": data_offsets ", off.dump(), " is not a pair of non-negative integers");
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.end < t.begin)
    fail(where, ": data_offsets ", off.dump(), " end before they begin");
  // numel x dtype bytes, guarding the product against overflow.
  uint64_t bytes = st_dtype_bytes(t.dtype);
  for (int64_t d : t.shape) {
    if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / (uint64_t)d)
      fail(where, ": shape ", e["shape"].dump(), " is too large");
    bytes *= (uint64_t)d;
  }
  if (bytes != t.end - t.begin)
    fail(where, ": data_offsets ", off.dump(), " span ", t.end - t.begin, " bytes but shape ",
         e["shape"].dump(), " x ", dt, " needs ", bytes);
  return t;
}

}  // namespace

const char* st_dtype_name(StDtype d) {
  switch (d) {
    case StDtype::F32: return "F32";
    case StDtype::BF16: return "BF16";
    case StDtype::F16: return "F16";
  }
  return "?";
}

size_t st_dtype_bytes(StDtype d) { return d == StDtype::F32 ? 4 : 2; }

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return (uint16_t)((u >> 16) | 0x40);  // keep it a (quiet) NaN
  u += 0x7fff + ((u >> 16) & 1);                            // round to nearest even
  return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  float mag;
  if (exp == 0) mag = std::ldexp((float)man, -24);                    // zero, subnormal
  else if (exp == 31) mag = man ? std::numeric_limits<float>::quiet_NaN()
                                : std::numeric_limits<float>::infinity();
  else mag = std::ldexp((float)(man | 0x400), exp - 25);
  uint32_t u;
  std::memcpy(&u, &mag, 4);
  u |= sign;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- reading ------------------------------------------------------------------

void check_not_dangling(const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(path, ec) && !fs::exists(path, ec))
    fail(path, " is a dangling symbolic link (to ", fs::read_symlink(path, ec).string(),
         ", which does not exist): restore its target or remove the link");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  if (!host_is_little_endian()) fail("safetensors needs a little-endian host");
  std::error_code ec;
  check_not_dangling(path);
  if (!fs::is_regular_file(path, ec)) fail("safetensors file ", path, " does not exist or is not a file");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) fail("cannot stat ", path, ": ", ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path, ": ", std::strerror(errno));
  if (size < 8) fail(path, " is ", size, " bytes: too short for a safetensors file (8-byte header length)");
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian
  if (n > size - 8)
    fail(path, ": header length ", n, " runs past the end of the file (", size,
         " bytes): the file is truncated or not safetensors");
  if (n > kMaxHeaderBytes) fail(path, ": header length ", n, " exceeds 100 MB: not a safetensors file");
  std::string text(n, '\0');
  in.read(text.data(), (std::streamsize)n);
  if (!in) fail("cannot read the header of ", path);
  data_start_ = 8 + n;
  const uint64_t data_bytes = size - data_start_;

  nlohmann::json h;
  try {
    h = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    fail(path, ": the header is not valid JSON (", e.what(), ")");
  }
  if (!h.is_object()) fail(path, ": the header is not a JSON object");
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(path, ": __metadata__ value '", m.key(), "' is not a string");
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_entry(it.key(), *it, path + ": tensor '" + it.key() + "'"));
  }
  // Tile the data section: sorted by offset, each starting where the last ended.
  std::sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const StTensor* prev = nullptr;
  for (const auto& t : tensors_) {
    if (t.end > data_bytes)
      fail(path, ": tensor '", t.name, "' data_offsets [", t.begin, ", ", t.end,
           "] run past the data section (", data_bytes, " bytes): the file is truncated or corrupt");
    if (t.begin < pos)
      fail(path, ": tensor '", t.name, "' data_offsets [", t.begin, ", ", t.end, "] overlap tensor '",
           prev->name, "' [", prev->begin, ", ", prev->end, "]");
    if (t.begin > pos)
      fail(path, ": tensor '", t.name, "' starts at byte ", t.begin, " but the previous tensor ends at ",
           pos, ": offsets must be contiguous (no gaps)");
    pos = t.end;
    prev = &t;
  }
  if (pos != data_bytes)
    fail(path, ": the tensors cover ", pos, " bytes of a ", data_bytes,
         "-byte data section: trailing bytes (corrupt or not safetensors)");
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::read_f32(const StTensor& t, float* out) const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail("cannot open ", path_, ": ", std::strerror(errno));
  in.seekg((std::streamoff)(data_start_ + t.begin));
  const size_t n = (size_t)t.numel();
  if (t.dtype == StDtype::F32) {
    in.read(reinterpret_cast<char*>(out), (std::streamsize)(n * 4));
  } else {
    std::vector<uint16_t> h(n);
    in.read(reinterpret_cast<char*>(h.data()), (std::streamsize)(n * 2));
    for (size_t i = 0; i < n; ++i) out[i] = t.dtype == StDtype::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
  }
  if (!in) fail("reading tensor '", t.name, "' from ", path_, " failed (file changed or unreadable)");
}

// ---- checkpoints (single file or sharded) -------------------------------------

nlohmann::json read_checkpoint_json(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) fail("cannot read ", path, ": ", ec.message());
  if (size > kMaxHeaderBytes)
    fail(path, " is ", size, " bytes: more than 100 MB is not a checkpoint's JSON (damaged or foreign file)");
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, " is not valid JSON (", e.what(), ")");
  }
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  std::error_code ec;
  std::vector<std::string> shard_files;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::string index;
  if (fs::is_directory(path, ec)) {
    const std::string index_path = (fs::path(path) / "model.safetensors.index.json").string();
    const std::string single = (fs::path(path) / "model.safetensors").string();
    // The index is never read while model.safetensors is there (below), so
    // only a link that would be read is refused as dangling.
    check_not_dangling(single);
    if (!fs::exists(single, ec)) check_not_dangling(index_path);
    // Both present: transformers' from_pretrained takes model.safetensors and
    // never reads the index (it checks for the single file first); ratchet
    // does the same, and says so, so the two tools load the same model.
    if (fs::exists(single, ec) && fs::exists(index_path, ec))
      note_ = path + " holds both model.safetensors and model.safetensors.index.json: reading "
              "model.safetensors, as transformers does (the index and its shards are ignored)";
    if (fs::exists(index_path, ec) && !fs::exists(single, ec)) {
      index = index_path;
      const nlohmann::json j = read_checkpoint_json(index);
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        fail(index, " has no \"weight_map\" object");
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it->is_string()) fail(index, ": weight_map entry '", it.key(), "' is not a file name");
        const std::string f = it->get<std::string>();
        if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
          fail(index, ": weight_map entry '", it.key(), "' names '", f, "', not a file in the directory");
        weight_map[it.key()] = f;
        if (std::find(shard_files.begin(), shard_files.end(), f) == shard_files.end())
          shard_files.push_back(f);
      }
      for (const auto& f : shard_files) check_not_dangling((fs::path(path) / f).string());
      for (const auto& f : shard_files)
        if (!fs::is_regular_file(fs::path(path) / f, ec))
          fail(index, " names shard ", f, " but ", (fs::path(path) / f).string(),
               " does not exist: copy every shard of the checkpoint");
      for (auto& f : shard_files) f = (fs::path(path) / f).string();
    } else if (fs::exists(single, ec)) {
      shard_files.push_back(single);
    } else {
      fail(path, " holds neither model.safetensors nor model.safetensors.index.json: "
           "point at a Hugging Face checkpoint directory or a .safetensors file");
    }
  } else {
    shard_files.push_back(path);
  }
  for (const auto& f : shard_files) {
    files_.push_back(std::make_unique<SafetensorsFile>(f));
    const SafetensorsFile* sf = files_.back().get();
    for (const auto& t : sf->tensors()) {
      auto [it, fresh] = where_.insert({t.name, {sf, &t}});
      if (!fresh)
        fail("tensor '", t.name, "' is in both ", it->second.first->path(), " and ", f);
      if (!index.empty()) {
        auto w = weight_map.find(t.name);
        if (w == weight_map.end())
          fail(f, " holds tensor '", t.name, "' that ", index, " does not list");
        if ((fs::path(path) / w->second).string() != f)
          fail(index, " puts tensor '", t.name, "' in ", w->second, " but it is in ", f);
      }
    }
  }
  for (const auto& [name, file] : weight_map)
    if (!where_.count(name))
      fail(index, " lists tensor '", name, "' in ", file, " but that shard does not hold it");
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> v;
  for (const auto& kv : where_) v.push_back(kv.first);
  return v;
}

const StTensor* SafetensorsCheckpoint::find(const std::string& name, const SafetensorsFile** file) const {
  auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  if (file) *file = it->second.first;
  return it->second.second;
}

// ---- writing --------------------------------------------------------------------

namespace {

uint64_t tensor_bytes(const StWrite& t, StDtype dtype) {
  uint64_t n = st_dtype_bytes(dtype);
  for (int64_t d : t.shape) n *= (uint64_t)d;
  return n;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<StWrite>& tensors,
                       StDtype dtype, const std::map<std::string, std::string>& metadata) {
  if (dtype == StDtype::F16) fail("writing F16 safetensors is not supported (use F32 or BF16): ", path);
  OrderedJson h = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson m = OrderedJson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t pos = 0;
  for (const auto& t : tensors) {
    if (h.contains(t.name)) fail("tensor '", t.name, "' given twice for ", path);
    const uint64_t b = tensor_bytes(t, dtype);
    h[t.name] = {{"dtype", st_dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {pos, pos + b}}};
    pos += b;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-aligned
  std::string head(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) head[i] = (char)((n >> (8 * i)) & 0xff);
  head += text;
  write_atomically(path, [&](FILE* f) {
    bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
    std::vector<uint16_t> half;  // (numel) one tensor in BF16
    for (const auto& t : tensors) {
      const size_t n = (size_t)(tensor_bytes(t, dtype) / st_dtype_bytes(dtype));
      if (!ok || n == 0) continue;
      if (dtype == StDtype::F32) {
        ok = std::fwrite(t.data, 4, n, f) == n;
      } else {
        half.resize(n);
        for (size_t i = 0; i < n; ++i) half[i] = f32_to_bf16(t.data[i]);
        ok = std::fwrite(half.data(), 2, n, f) == n;
      }
    }
    return ok;
  });
}

std::vector<std::string> write_safetensors_checkpoint(
    const std::string& dir, const std::vector<StWrite>& tensors, StDtype dtype,
    const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes) {
  // Greedy split in the given order; a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<StWrite>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const uint64_t b = tensor_bytes(t, dtype);
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += b;
    total += b;
  }
  // Every file is written under a ".partial" name first and renamed into place
  // only when all of them are: a failure (a full disk) leaves an earlier export
  // in dir whole, never its index with some of the new shards.
  std::vector<std::string> written;
  const auto partial = [&](const std::string& name) { return (fs::path(dir) / (name + ".partial")).string(); };
  try {
    if (shards.size() == 1) {
      write_safetensors(partial("model.safetensors"), tensors, dtype, metadata);
      written.push_back("model.safetensors");
    } else {
      OrderedJson weight_map = OrderedJson::object();
      const int n = (int)shards.size();
      for (int i = 0; i < n; ++i) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, n);
        write_safetensors(partial(name), shards[i], dtype, metadata);
        written.push_back(name);
        for (const auto& t : shards[i]) weight_map[t.name] = name;
      }
      OrderedJson index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      write_text_atomically(partial("model.safetensors.index.json"), index.dump(2) + "\n");
      written.push_back("model.safetensors.index.json");  // renamed last: readers look for it first
    }
  } catch (...) {
    for (const auto& w : written) std::remove(partial(w).c_str());
    throw;
  }
  for (size_t i = 0; i < written.size(); ++i) {
    const std::string to = (fs::path(dir) / written[i]).string();
    if (std::rename(partial(written[i]).c_str(), to.c_str()) != 0) {
      const int err = errno;
      for (size_t k = i; k < written.size(); ++k) std::remove(partial(written[k]).c_str());
      fail("cannot rename ", partial(written[i]), " to ", to, ": ", std::strerror(err));
    }
  }
  return written;
}

}  // namespace ratchet
