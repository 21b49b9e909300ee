#include "ckpt/checkpoint_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "ckpt/checkpoint_io.h"
#include "core/error.h"
#include "core/json.h"
#include "data/h5_util.h"
#include "model/param_layout.h"

namespace ratchet {

using namespace ckpt_io;

namespace {

bool stat_size(const std::string& path, uint64_t* size) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  *size = (uint64_t)st.st_size;
  return true;
}

H5Handle open_ro(const std::string& path, const std::string& ctx) {
  H5Handle fapl = h5_fapl_no_locking();
  return H5Handle(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open ", ctx),
                  H5Fclose);
}

// A 1-D float dataset's length (Error unless it is one).
uint64_t dataset_length(hid_t f, const char* name, const std::string& ctx) {
  H5Handle d(H5_CHECK(H5Dopen2(f, name, H5P_DEFAULT), ctx, ": /", name), H5Dclose);
  H5Handle space(H5_CHECK(H5Dget_space(d), ctx), H5Sclose);
  hsize_t dims[1] = {0};
  if (H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, dims, nullptr) != 1)
    fail(ctx, ": /", name, " is not a 1-D tensor");
  return dims[0];
}

uint32_t dataset_crc_attr(hid_t f, const char* name, const std::string& ctx) {
  H5Handle d(H5_CHECK(H5Dopen2(f, name, H5P_DEFAULT), ctx, ": /", name), H5Dclose);
  return (uint32_t)get_u64(d, "crc32", ctx + ": /" + name);
}

// Elements [off, off + n) of a 1-D float dataset.
void read_slab(hid_t d, uint64_t off, uint64_t n, float* out, const std::string& ctx) {
  if (n == 0) return;
  H5Handle space(H5_CHECK(H5Dget_space(d), ctx), H5Sclose);
  hsize_t start[1] = {off}, count[1] = {n};
  H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr), ctx);
  H5Handle mem(H5_CHECK(H5Screate_simple(1, count, nullptr), ctx), H5Sclose);
  H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, out), ctx,
           " is unreadable (truncated?)");
}

}  // namespace

std::string describe_param_value(const ParamLayout& layout, uint64_t i, float v) {
  int t = 0;
  while (t + 1 < kNumParamTensors && layout.offsets[t + 1] <= i) t++;
  while (layout.sizes[t] == 0) t++;
  std::ostringstream os;
  os << "tensor '" << ParamLayout::name(t) << "' holds " << v << " at element "
     << i - layout.offsets[t] << " (of " << layout.sizes[t] << ")";
  return os.str();
}

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  meta_ = read_checkpoint_meta(dir);  // format and version first: a newer one is said as such
  P_ = ParamLayout(meta_.model).total;
  version_ = meta_.param_shards > 0 ? 3 : meta_.optimizer_shards > 0 ? 2 : 1;
  if (version_ == 3)
    open_v3();
  else
    open_v1_v2();
  std::sort(segs_.begin(), segs_.end(), [](const Segment& a, const Segment& b) {
    return a.t != b.t ? a.t < b.t : a.lo < b.lo;
  });
}

uint64_t CheckpointReader::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& d : datasets_) n += d.n * sizeof(float);
  return n;
}

void CheckpointReader::open_v1_v2() {
  const std::string state = dir_ + "/" + kStateFile;
  const std::string ctx = "checkpoint " + state;
  H5Handle f = open_ro(state, ctx);
  const int nstate = version_ == 2 ? 1 : 3;
  for (int t = 0; t < nstate; t++) {
    const uint64_t n = dataset_length(f, kTensorNames[t], ctx);
    if (n != P_) fail(ctx, ": /", kTensorNames[t], " has ", n, " elements, the model needs ", P_);
    segs_.push_back({state, t, 0, 0, P_});
    datasets_.push_back({state, t, P_, dataset_crc_attr(f, kTensorNames[t], ctx)});
  }
  if (version_ == 1) return;
  // Format 2: ZeRO-1 optimizer shards, which must tile [0, P) in order.
  const int n = meta_.optimizer_shards;
  uint64_t next = 0;
  for (int r = 0; r < n; r++) {
    const std::string path = dir_ + "/" + optimizer_shard_name(r);
    const std::string sctx = "checkpoint shard " + path;
    H5Handle s(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5_fapl_no_locking()), "cannot open ",
                        sctx, " (one of ", n, " optimizer shards)"),
               H5Fclose);
    if (get_str(s, "format", sctx) != "ratchet-optimizer-shard")
      fail(sctx, " is not an optimizer shard (format attribute)");
    const int64_t step = get_i64(s, "step", sctx), shard = get_i64(s, "shard", sctx),
                  shards = get_i64(s, "shards", sctx);
    const uint64_t np = get_u64(s, "num_params", sctx), lo = get_u64(s, "lo", sctx),
                   hi = get_u64(s, "hi", sctx);
    if (step != meta_.step || shard != r || shards != n || np != P_)
      fail(sctx, " does not belong to this checkpoint (step ", step, ", shard ", shard, " of ",
           shards, ", ", np, " parameters; expected step ", meta_.step, ", shard ", r, " of ", n,
           ", ", P_, ")");
    if (lo != next || hi < lo || hi > P_)
      fail(sctx, " covers [", lo, ", ", hi, ") but the next range starts at ", next);
    next = hi;
    for (int t = 1; t < 3; t++) {
      const uint64_t len = dataset_length(s, kTensorNames[t], sctx);
      if (len != hi - lo)
        fail(sctx, ": /", kTensorNames[t], " has ", len, " elements, the range needs ", hi - lo);
      if (hi > lo) segs_.push_back({path, t, 0, lo, hi});
      datasets_.push_back({path, t, len, dataset_crc_attr(s, kTensorNames[t], sctx)});
    }
  }
  if (next != P_)
    fail("checkpoint ", dir_, ": the optimizer shards cover [0, ", next, ") of ", P_, " parameters");
}

void CheckpointReader::open_v3() {
  const std::string mpath = dir_ + "/manifest.json";
  const std::string mctx = "checkpoint manifest " + mpath;
  nlohmann::json m;
  {
    std::ifstream in(mpath);
    if (!in) fail(mctx, " is missing: the shards of a format-3 checkpoint cannot be checked without it");
    try {
      m = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(mctx, " is not valid JSON (", e.what(), ")");
    }
  }
  std::vector<std::string> files;
  try {
    if (!m.is_object()) fail(mctx, " is not a JSON object: the manifest is damaged");
    if (json_uint(m, "format_version", UINT64_MAX, mctx) != 3 ||
        json_uint(m, "step", INT64_MAX, mctx) != (uint64_t)meta_.step ||
        json_uint(m, "num_params", UINT64_MAX, mctx) != P_)
      fail(mctx, " does not describe this checkpoint (format_version ", m.at("format_version").dump(),
           ", step ", m.at("step").dump(), ", num_params ", m.at("num_params").dump(),
           "; state.h5 has format 3, step ", meta_.step, ", ", P_, " parameters)");
    for (const auto& f : m.at("files")) files.push_back(f.dump());
  } catch (const nlohmann::json::exception& e) {
    fail(mctx, " is malformed (", e.what(), ")");
  }
  // state.h5: its size and whole-file checksum (it holds no tensor checksums of its own).
  bool state_seen = false;
  for (const auto& text : files) {
    const auto j = nlohmann::json::parse(text);
    if (!j.contains("name") || j["name"] != kStateFile) {
      shards_.push_back(ShardFileInfo::from_json(text, mctx));
      continue;
    }
    state_seen = true;
    const std::string state = dir_ + "/" + kStateFile;
    uint64_t size = 0;
    stat_size(state, &size);
    uint64_t want_bytes = 0, want_crc = 0;
    want_bytes = json_uint(j, "bytes", UINT64_MAX, mctx + ": the state.h5 entry");
    want_crc = json_uint(j, "crc32", UINT32_MAX, mctx + ": the state.h5 entry");
    if (size != want_bytes)
      fail("checkpoint ", state, " has ", size, " bytes, the manifest says ", want_bytes,
           " (truncated or replaced)");
    const uint32_t crc = file_crc(state);
    if (crc != want_crc)
      fail("checkpoint ", state, " fails its checksum (crc32 ", crc, ", manifest ", want_crc,
           "): the file is corrupted");
  }
  if (!state_seen) fail(mctx, " has no state.h5 entry");
  if ((int)shards_.size() != meta_.param_shards)
    fail(mctx, " lists ", shards_.size(), " shard(s) but state.h5 says the checkpoint has ",
         meta_.param_shards, ": a shard entry is missing or extra");
  // Every shard: present, of the listed size, its header agreeing with the entry.
  std::vector<std::pair<uint64_t, uint64_t>> all;
  for (const auto& s : shards_) {
    const std::string path = dir_ + "/" + s.name;
    const std::string ctx = "checkpoint shard " + path;
    uint64_t size = 0;
    if (!stat_size(path, &size))
      fail(ctx, " is missing (one of ", shards_.size(), " shards the manifest lists)");
    if (size != s.bytes)
      fail(ctx, " has ", size, " bytes, the manifest says ", s.bytes, " (truncated?)");
    const uint64_t n = ranges_length(s.ranges);
    // The headers' checksum before the HDF5 library parses them (a corrupted
    // header made libhdf5 read past a heap buffer: tests/fuzz/fuzz_ckpt_manifest.cpp).
    if (s.has_header_crc) {
      const uint32_t crc = shard_header_crc(path, s.bytes, s.offset, n);
      if (crc != s.header_crc)
        fail(ctx, "'s headers fail their checksum (crc32 ", crc, ", manifest ", s.header_crc,
             "): the file or its manifest entry is damaged; use an earlier checkpoint");
    }
    H5Handle f = open_ro(path, ctx);
    if (get_str(f, "format", ctx) != "ratchet-shard")
      fail(ctx, " is not a checkpoint shard (format attribute)");
    const int64_t step = get_i64(f, "step", ctx), rank = get_i64(f, "rank", ctx);
    const uint64_t np = get_u64(f, "num_params", ctx);
    if (step != meta_.step || rank != s.rank || np != P_)
      fail(ctx, " does not belong to this checkpoint (step ", step, ", rank ", rank, ", ", np,
           " parameters; the manifest says step ", meta_.step, ", rank ", s.rank, ", ", P_, ")");
    {  // /ranges must be the manifest's
      H5Handle d(H5_CHECK(H5Dopen2(f, "ranges", H5P_DEFAULT), ctx, ": /ranges"), H5Dclose);
      H5Handle space(H5_CHECK(H5Dget_space(d), ctx), H5Sclose);
      hsize_t dims[2] = {0, 0};
      if (H5Sget_simple_extent_ndims(space) != 2 ||
          H5Sget_simple_extent_dims(space, dims, nullptr) != 2 || dims[1] != 2 ||
          dims[0] != s.ranges.size())
        fail(ctx, ": /ranges disagrees with the manifest (", s.ranges.size(), " ranges)");
      std::vector<uint64_t> flat(dims[0] * 2);
      if (!flat.empty())
        H5_CHECK(H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data()), ctx,
                 ": /ranges is unreadable");
      for (size_t k = 0; k < s.ranges.size(); k++)
        if (flat[2 * k] != s.ranges[k].first || flat[2 * k + 1] != s.ranges[k].second)
          fail(ctx, ": /ranges disagrees with the manifest at range ", k);
    }
    for (int t = 0; t < 3; t++) {
      const uint64_t len = dataset_length(f, kTensorNames[t], ctx);
      if (len != n)
        fail(ctx, ": /", kTensorNames[t], " has ", len, " elements, its ranges hold ", n);
      if (s.has_header_crc && n > 0) {  // the data is where the checked headers were cut
        H5Handle d(H5_CHECK(H5Dopen2(f, kTensorNames[t], H5P_DEFAULT), ctx), H5Dclose);
        if (H5Dget_offset(d) != (haddr_t)s.offset[t])
          fail(ctx, ": /", kTensorNames[t], " is not stored where the manifest says (byte ",
               s.offset[t], "): the file is corrupted; use an earlier checkpoint");
      }
      const uint32_t crc = dataset_crc_attr(f, kTensorNames[t], ctx);
      if (crc != s.crc[t])
        fail(ctx, ": /", kTensorNames[t], "'s crc32 ", crc, " is not the manifest's ", s.crc[t]);
      datasets_.push_back({path, t, n, crc});
      uint64_t off = 0;
      for (const auto& [lo, hi] : s.ranges) {
        segs_.push_back({path, t, off, lo, hi});
        off += hi - lo;
      }
    }
    for (const auto& [lo, hi] : s.ranges) {
      if (hi <= lo || hi > P_)
        fail(mctx, ": ", s.name, " lists the range [", lo, ", ", hi, ") of ", P_, " parameters");
      all.emplace_back(lo, hi);
    }
  }
  // The ranges of all shards tile [0, P): nothing missing, nothing twice.
  std::sort(all.begin(), all.end());
  uint64_t next = 0;
  for (const auto& [lo, hi] : all) {
    if (lo != next)
      fail("checkpoint ", dir_, ": ", lo < next ? "two shards both hold" : "no shard holds",
           " the parameters [", std::min(lo, next), ", ", std::max(lo, next),
           ") (a shard or a manifest entry is missing or doubled)");
    next = hi;
  }
  if (next != P_)
    fail("checkpoint ", dir_, ": no shard holds the parameters [", next, ", ", P_,
         ") (a shard or a manifest entry is missing)");
}

void CheckpointReader::read(int t, uint64_t lo, uint64_t hi, float* out) const {
  RATCHET_ASSERT(t >= 0 && t < 3 && lo <= hi && hi <= P_);
  // Segments are sorted by (t, lo) and tile [0, P) per tensor (checked at open).
  std::string open_path;
  H5Handle f, d;
  for (const Segment& s : segs_) {
    if (s.t != t || s.hi <= lo || s.lo >= hi) continue;
    const uint64_t a = std::max(lo, s.lo), b = std::min(hi, s.hi);
    const std::string ctx = "checkpoint " + s.path + ": /" + kTensorNames[t];
    if (s.path != open_path) {
      d.reset();
      f = open_ro(s.path, "checkpoint " + s.path);
      d = H5Handle(H5_CHECK(H5Dopen2(f, kTensorNames[t], H5P_DEFAULT), ctx), H5Dclose);
      open_path = s.path;
    }
    read_slab(d, s.off + (a - s.lo), b - a, out + (a - lo), ctx);
  }
}

void CheckpointReader::verify(int part, int parts) const {
  RATCHET_ASSERT(parts >= 1 && part >= 0 && part < parts);
  const ParamLayout layout(meta_.model);
  std::vector<float> block;
  for (size_t i = 0; i < datasets_.size(); i++) {
    if ((int)(i % parts) != part) continue;
    const Dataset& ds = datasets_[i];
    const std::string ctx = "checkpoint " + ds.path + ": /" + kTensorNames[ds.t];
    H5Handle f = open_ro(ds.path, "checkpoint " + ds.path);
    H5Handle d(H5_CHECK(H5Dopen2(f, kTensorNames[ds.t], H5P_DEFAULT), ctx), H5Dclose);
    uint32_t crc = 0;
    std::string bad;
    for (uint64_t at = 0; at < ds.n; at += kVerifyBlock) {
      const uint64_t n = std::min<uint64_t>(kVerifyBlock, ds.n - at);
      block.resize(n);
      read_slab(d, at, n, block.data(), ctx);
      crc = crc_update(crc, block.data(), n);
      for (uint64_t k = 0; k < n && bad.empty(); k++) {
        if (std::isfinite(block[k])) continue;
        // The element's place in the flat vector: from the segments of this file.
        uint64_t global = at + k;
        for (const Segment& s : segs_)
          if (s.path == ds.path && s.t == ds.t && at + k >= s.off && at + k < s.off + (s.hi - s.lo))
            global = s.lo + (at + k - s.off);
        bad = ds.t == 0 ? describe_param_value(layout, global, block[k])
                        : std::string("/") + kTensorNames[ds.t] + " holds " +
                              std::to_string(block[k]) + " at element " + std::to_string(global);
      }
    }
    if (crc != ds.crc)
      fail(ctx, " fails its checksum (crc32 ", crc, ", recorded ", ds.crc,
           "): the file is corrupted");
    if (!bad.empty())
      fail("checkpoint ", ds.path, ": ", bad,
           ": the weights are not finite (saved after the run diverged); not a usable checkpoint");
  }
}

Checkpoint read_checkpoint_params(const std::string& dir) {
  const CheckpointReader r(dir);
  r.verify();
  Checkpoint ck;
  ck.meta = r.meta();
  ck.meta.param_shards = 0;
  ck.params.resize(r.num_params());
  r.read(0, 0, r.num_params(), ck.params.data());
  return ck;
}

Checkpoint read_checkpoint_part(const CheckpointReader& r, const FlatRanges& moment_ranges,
                                const FlatRanges& param_ranges) {
  Checkpoint ck;
  ck.meta = r.meta();
  const size_t P = r.num_params();
  const FlatRanges all = {{0, P}};
  for (const FlatRanges* want : {&param_ranges, &moment_ranges})
    for (const auto& [lo, hi] : *want)
      if (lo > hi || hi > P)
        fail("checkpoint ", r.dir(), ": range [", lo, ", ", hi, ") of its ", P,
             " parameters asked for: this run's model does not match the checkpoint's");
  // Tensor t's elements of `want` (empty: all) back to back.
  auto read_ranges = [&](int t, const FlatRanges& want) {
    const FlatRanges& ranges = want.empty() ? all : want;
    std::vector<float> out(ranges_length(ranges));
    size_t at = 0;
    for (const auto& [lo, hi] : ranges) {
      r.read(t, lo, hi, out.data() + at);
      at += hi - lo;
    }
    return out;
  };
  ck.param_ranges = param_ranges;
  ck.params = read_ranges(0, param_ranges);
  ck.moment_ranges = moment_ranges;
  ck.adam_m = read_ranges(1, moment_ranges);
  ck.adam_v = read_ranges(2, moment_ranges);
  return ck;
}

}  // namespace ratchet
