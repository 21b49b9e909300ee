// Format 3: a checkpoint is a set of per-rank shards plus one manifest.
//
//   CKPT_DIR/step_00000100/
//     state.h5         the metadata (checkpoint.h's attributes), no tensors;
//                      format_version 3, param_shards = N
//     shard_00000.h5   one file per writing rank (named by its rank):
//     shard_00002.h5     /params, /adam_m, /adam_v: FP32, the rank's ranges
//     ...                back to back; /ranges: (k, 2) uint64 [lo, hi) of the
//                        flat parameter vector; a crc32 attribute per tensor;
//                        attributes format = "ratchet-shard", step, rank,
//                        world, num_params
//     manifest.json    the list of files: state.h5 (bytes, crc32 of the
//                      whole file) and each shard (rank, ranges, bytes,
//                      crc32 and file offset of each tensor, crc32 of the
//                      rest of the file). The shards' ranges must tile
//                      [0, P) exactly: a shard missing (file or manifest
//                      entry), truncated, or corrupt makes the checkpoint
//                      invalid, and resume falls back to the previous one.
//     COMMITTED        written last (checkpoint_dir.h)
//
// Each rank writes the FP32 master parameters and the moments of the ranges
// it owns (DistributedStrategy::owned_ranges(); at stage 0, where every rank holds
// everything, [0, P) split evenly so the ranks share the writing), in
// parallel, into the staging directory; nothing is gathered to rank 0. Rank
// 0 then writes state.h5 and the manifest from the shards' descriptions.
// Any reader assembles any ranges from any set of shards
// (checkpoint_reader.h), so a checkpoint of any (stage, world size) resumes
// at any other.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"

namespace ratchet {

using FlatRanges = std::vector<std::pair<size_t, size_t>>;

// What a rank wrote, as the manifest lists it.
struct ShardFileInfo {
  int rank = 0;
  std::string name;    // shard_00003.h5
  FlatRanges ranges;   // ascending, disjoint
  uint64_t bytes = 0;  // the file's size
  uint32_t crc[3] = {0, 0, 0};  // params, adam_m, adam_v
  // Where each tensor's data starts in the file (contiguous, 4 bytes per
  // element), and a crc32 of every byte of the file outside those three
  // ranges: the HDF5 headers, attributes and /ranges. The reader checks it
  // before the HDF5 library parses the file (its parser is not hardened
  // against corrupted headers). Manifests written before it lack both
  // (has_header_crc false): read as before, without that check.
  uint64_t offset[3] = {0, 0, 0};
  uint32_t header_crc = 0;
  bool has_header_crc = false;
  std::string to_json() const;
  // Throws Error (naming `ctx`) for a malformed entry.
  static ShardFileInfo from_json(const std::string& text, const std::string& ctx);
};

std::string param_shard_name(int rank);  // "shard_00003.h5"
// crc32 of the `bytes`-byte file at `path` outside the tensors' data
// ([offset[t], offset[t] + 4 n) for the three tensors of n elements each).
// Throws Error naming the file when the ranges do not fit in it, overlap, or
// it cannot be read.
uint32_t shard_header_crc(const std::string& path, uint64_t bytes, const uint64_t offset[3],
                          uint64_t n);
size_t ranges_length(const FlatRanges& r);

// Writes dir/shard_<rank>.h5 (fsynced): params, m and v each hold
// ranges_length(ranges) floats, the ranges back to back. Written in blocks of
// a few MB (the HDF5 library lock is released between them, so a loader
// thread is not held up behind a whole shard). Fault point ckpt-mid-write
// fires after the parameters are written. Throws Error naming the file (disk
// full, file-size limit, I/O error).
ShardFileInfo write_param_shard(const std::string& dir, int64_t step, int rank, int world,
                                size_t P, const FlatRanges& ranges, const float* params,
                                const float* m, const float* v);

// Rank 0, after every shard is written: state.h5 (format 3) and
// manifest.json, fsynced. `meta.param_shards` is set from `shards`.
void write_sharded_state(const std::string& dir, CheckpointMeta meta,
                         const std::vector<ShardFileInfo>& shards);

}  // namespace ratchet
