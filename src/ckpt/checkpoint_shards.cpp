#include "ckpt/checkpoint_shards.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <utility>
#include <vector>

#include "ckpt/checkpoint_io.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/json.h"
#include "data/h5_util.h"
#include "model/param_layout.h"

namespace ratchet {

using namespace ckpt_io;

namespace {

// Floats per H5Dwrite: 4 MB, small enough that the HDF5 library lock (a
// thread-safe build serialises every call) is held only briefly.
constexpr size_t kBlock = 1 << 20;

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) fail("cannot stat ", path);
  return (uint64_t)st.st_size;
}

}  // namespace

uint64_t ckpt_io::json_uint(const nlohmann::json& j, const char* key, uint64_t max,
                           const std::string& ctx) {
  if (!j.is_object() || !j.contains(key))
    fail(ctx, ": '", key, "' is missing: the manifest is damaged (use an earlier checkpoint)");
  const auto& v = j[key];
  if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
    fail(ctx, ": '", key, "' is ", v.dump(), ", not a whole number from 0 to ", max,
         ": the manifest is damaged (use an earlier checkpoint)");
  return v.get<uint64_t>();
}

uint32_t shard_header_crc(const std::string& path, uint64_t bytes, const uint64_t offset[3],
                          uint64_t n) {
  // The three data ranges, in file order, each inside the file, none overlapping.
  std::vector<std::pair<uint64_t, uint64_t>> data;
  for (int t = 0; t < 3; t++) {
    if (n == 0) continue;
    if (n > bytes / 4 || offset[t] > bytes - 4 * n)
      fail("checkpoint shard ", path, ": the manifest puts /", kTensorNames[t], " (", n,
           " floats) at byte ", offset[t], ", outside the file's ", bytes,
           " bytes: the manifest is damaged (use an earlier checkpoint)");
    data.emplace_back(offset[t], offset[t] + 4 * n);
  }
  std::sort(data.begin(), data.end());
  for (size_t k = 1; k < data.size(); k++)
    if (data[k].first < data[k - 1].second)
      fail("checkpoint shard ", path, ": the manifest's tensor offsets overlap: the manifest is "
           "damaged (use an earlier checkpoint)");
  data.emplace_back(bytes, bytes);  // the end
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read checkpoint shard ", path);
  std::vector<char> buf(1 << 16);
  uint32_t crc = 0;
  uint64_t at = 0;
  for (const auto& [lo, hi] : data) {
    in.seekg((std::streamoff)at);
    for (uint64_t left = lo - at; left > 0;) {
      const size_t k = (size_t)std::min<uint64_t>(left, buf.size());
      if (!in.read(buf.data(), (std::streamsize)k))
        fail("checkpoint shard ", path, " is shorter than the manifest says (truncated?)");
      crc = crc_bytes(crc, buf.data(), k);
      left -= k;
    }
    at = hi;
  }
  return crc;
}

std::string param_shard_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard_%05d.h5", rank);
  return buf;
}

size_t ranges_length(const FlatRanges& r) {
  size_t n = 0;
  for (const auto& [lo, hi] : r) n += hi - lo;
  return n;
}

std::string ShardFileInfo::to_json() const {
  OrderedJson j;
  j["name"] = name;
  j["rank"] = rank;
  j["bytes"] = bytes;
  j["ranges"] = OrderedJson::array();
  for (const auto& [lo, hi] : ranges) j["ranges"].push_back({lo, hi});
  j["datasets"] = OrderedJson::object();
  for (int i = 0; i < 3; i++) {
    j["datasets"][kTensorNames[i]] = {{"crc32", crc[i]}};
    if (has_header_crc) j["datasets"][kTensorNames[i]]["offset"] = offset[i];
  }
  if (has_header_crc) j["header_crc32"] = header_crc;
  return j.dump();
}

ShardFileInfo ShardFileInfo::from_json(const std::string& text, const std::string& ctx) {
  ShardFileInfo s;
  try {
    const auto j = nlohmann::json::parse(text);
    s.name = j.at("name").get<std::string>();
    s.rank = (int)json_uint(j, "rank", INT32_MAX, "the rank");
    s.bytes = json_uint(j, "bytes", UINT64_MAX, "the size");
    const auto& ranges = j.at("ranges");
    if (!ranges.is_array()) fail("'ranges' is not a list");
    for (const auto& r : ranges) {
      if (!r.is_array() || r.size() != 2) fail("a range is not [lo, hi]");
      const nlohmann::json pair = {{"lo", r[0]}, {"hi", r[1]}};
      s.ranges.emplace_back(json_uint(pair, "lo", UINT64_MAX, "a range"),
                            json_uint(pair, "hi", UINT64_MAX, "a range"));
    }
    for (int i = 0; i < 3; i++)
      s.crc[i] = (uint32_t)json_uint(j.at("datasets").at(kTensorNames[i]), "crc32", UINT32_MAX,
                                     std::string("the crc32 of ") + kTensorNames[i]);
    if (j.contains("header_crc32")) {
      s.has_header_crc = true;
      s.header_crc = (uint32_t)json_uint(j, "header_crc32", UINT32_MAX, "the headers' crc32");
      for (int i = 0; i < 3; i++)
        s.offset[i] = json_uint(j.at("datasets").at(kTensorNames[i]), "offset", UINT64_MAX,
                                std::string("the offset of ") + kTensorNames[i]);
    }
  } catch (const nlohmann::json::exception& e) {
    fail(ctx, ": a shard entry is malformed (", e.what(), ")");
  } catch (const Error& e) {
    fail(ctx, ": a shard entry is malformed (", e.what(), ")");
  }
  // Only a plain shard_NNNNN.h5 name: the manifest never points outside the checkpoint.
  if (s.rank < 0 || s.name != param_shard_name(s.rank))
    fail(ctx, ": shard entry '", s.name, "' of rank ", s.rank, " is not named ",
         param_shard_name(std::max(0, s.rank)));
  return s;
}

ShardFileInfo write_param_shard(const std::string& dir, int64_t step, int rank, int world,
                                size_t P, const FlatRanges& ranges, const float* params,
                                const float* m, const float* v) {
  h5_init();
  ShardFileInfo info;
  info.rank = rank;
  info.name = param_shard_name(rank);
  info.ranges = ranges;
  const size_t n = ranges_length(ranges);
  for (const auto& [lo, hi] : ranges) RATCHET_ASSERT(lo < hi && hi <= P);
  const std::string path = dir + "/" + info.name;
  const std::string ctx = "writing checkpoint shard " + path;
  try {
    check_room(dir, 3 * n * sizeof(float) + (1 << 16));
  } catch (const Error& e) {
    fail(ctx, ": ", e.what());
  }
  {
    H5Handle f(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), ctx),
               H5Fclose);
    {  // the ranges, (k, 2)
      std::vector<uint64_t> flat;
      for (const auto& [lo, hi] : ranges) flat.insert(flat.end(), {lo, hi});
      hsize_t dims[2] = {ranges.size(), 2};
      H5Handle space(H5_CHECK(H5Screate_simple(2, dims, nullptr), ctx), H5Sclose);
      H5Handle d(H5_CHECK(H5Dcreate2(f, "ranges", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                     H5P_DEFAULT),
                          ctx, ": /ranges"),
                 H5Dclose);
      if (!flat.empty())
        H5_CHECK(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data()), ctx,
                 ": /ranges (disk full?)");
    }
    const float* data[3] = {params, m, v};
    for (int i = 0; i < 3; i++) {
      hsize_t dims[1] = {n};
      H5Handle space(H5_CHECK(H5Screate_simple(1, dims, nullptr), ctx), H5Sclose);
      H5Handle d(H5_CHECK(H5Dcreate2(f, kTensorNames[i], H5T_IEEE_F32LE, space, H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT),
                          ctx, ": /", kTensorNames[i]),
                 H5Dclose);
      uint32_t crc = 0;
      for (size_t at = 0; at < n; at += kBlock) {
        hsize_t start[1] = {at}, count[1] = {std::min(kBlock, n - at)};
        H5Handle mem(H5_CHECK(H5Screate_simple(1, count, nullptr), ctx), H5Sclose);
        H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr), ctx);
        H5_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, data[i] + at), ctx, ": /",
                 kTensorNames[i], " (disk full?)");
        crc = crc_update(crc, data[i] + at, count[0]);
      }
      info.crc[i] = crc;
      const haddr_t off = H5Dget_offset(d);  // contiguous: where the data starts
      info.offset[i] = n == 0 || off == HADDR_UNDEF ? 0 : (uint64_t)off;
      put_u64(d, "crc32", crc, ctx);
      if (i == 0) fault_point("ckpt-mid-write");
    }
    put_str(f, "format", "ratchet-shard", ctx);
    put_i64(f, "step", step, ctx);
    put_i64(f, "rank", rank, ctx);
    put_i64(f, "world", world, ctx);
    put_u64(f, "num_params", P, ctx);
    H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL), ctx, " (disk full?)");
    if (f.close() < 0) fail(ctx, ": closing failed (disk full?)");
  }
  fsync_path(path);
  info.bytes = file_size(path);
  info.header_crc = shard_header_crc(path, info.bytes, info.offset, n);
  info.has_header_crc = true;
  return info;
}

void write_sharded_state(const std::string& dir, CheckpointMeta meta,
                         const std::vector<ShardFileInfo>& shards) {
  meta.param_shards = (int)shards.size();
  meta.optimizer_shards = 0;
  RATCHET_ASSERT(!shards.empty());
  Checkpoint ck;
  ck.meta = meta;
  write_checkpoint_files(dir, ck);  // state.h5 only, format 3
  const std::string state = dir + "/" + kStateFile;
  const std::string mpath = dir + "/manifest.json";
  {
    std::ofstream mf(mpath);
    char created[64];
    std::time_t now = std::time(nullptr);
    std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    OrderedJson m;
    m["format"] = "ratchet-checkpoint";
    m["format_version"] = 3;
    m["step"] = meta.step;
    m["created"] = created;
    m["num_params"] = ParamLayout(meta.model).total;
    m["shards"] = shards.size();
    m["files"] = OrderedJson::array(
        {{{"name", kStateFile}, {"bytes", file_size(state)}, {"crc32", file_crc(state)}}});
    for (const auto& s : shards) m["files"].push_back(OrderedJson::parse(s.to_json()));
    mf << m.dump(2) << "\n";
    mf.flush();
    if (!mf) fail("cannot write ", mpath, " (disk full?)");
  }
  fsync_path(mpath);
}

}  // namespace ratchet
