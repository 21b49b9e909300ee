#include "data/shard_identity.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "data/shard_cache.h"

namespace ratchet {

namespace {

// Shard i's path as a snapshot, checked against the file ds has open.
ShardCache::Snapshot shard_snapshot_one(const ShardCache& cache, const TokenDataset& ds, size_t i) {
  ShardCache::Snapshot s = cache.snapshot({ds.shard_path(i)});
  if (!s.sig.empty() && s.ids.at(0) != ds.shard_file_id(i)) s.sig.clear();
  return s;
}

}  // namespace

ShardCache::Snapshot shard_snapshot(const ShardCache& cache, const TokenDataset& ds) {
  std::vector<std::string> files;
  for (size_t i = 0; i < ds.num_shards(); i++) files.push_back(ds.shard_path(i));
  ShardCache::Snapshot s = cache.snapshot(files);
  for (size_t i = 0; i < ds.num_shards() && !s.sig.empty(); i++)
    if (s.ids.at(i) != ds.shard_file_id(i)) s.sig.clear();
  return s;
}

std::map<std::string, std::string> shard_content_identity(const TokenDataset& ds,
                                                          const std::string& prefix) {
  std::map<std::string, std::string> out;
  out[prefix + "_shards"] = std::to_string(ds.num_shards());
  std::vector<int32_t> buf;  // (1M) tokens per read, when a shard must be read
  const ShardCache cache;
  uint64_t start = 0;  // the shard's first position in the stream
  for (size_t i = 0; i < ds.num_shards(); i++) {
    const uint64_t n = ds.shard_num_tokens(i);
    uLong crc = crc32(0L, Z_NULL, 0);
    const std::string kind = "crc32 tokens=" + std::to_string(n);
    const ShardCache::Snapshot snap = shard_snapshot_one(cache, ds, i);
    const auto known = cache.lookup(kind, snap);
    const bool hit = known && known->size() == 8 &&
                     known->find_first_not_of("0123456789abcdef") == std::string::npos;
    if (hit) {
      crc = std::strtoul(known->c_str(), nullptr, 16);  // the same file as when computed (shard_cache.h)
    } else {
      buf.resize(1 << 20);
      for (uint64_t done = 0; done < n;) {
        const size_t k = (size_t)std::min<uint64_t>(buf.size(), n - done);
        ds.read(start + done, k, buf.data());
        crc = crc32(crc, (const Bytef*)buf.data(), (uInt)(k * sizeof(int32_t)));
        done += k;
      }
    }
    start += n;
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
    if (!hit) cache.store(kind, snap, hex);
    out[prefix + "_shard_" + std::to_string(i)] =
        ds.shard_path(i) + " tokens=" + std::to_string(n) + " crc32=" + hex;
  }
  return out;
}

bool has_shard_content_identity(const std::map<std::string, std::string>& identity,
                                const std::string& prefix) {
  return identity.count(prefix + "_shards") > 0;
}

}  // namespace ratchet
