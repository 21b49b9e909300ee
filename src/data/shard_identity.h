// The content identity of a dataset's shards, kept in a checkpoint's run
// identity (issue 14, defect 6): a resume whose shard was replaced under the
// same path is refused, naming the shard.
//
// Per shard: its path, num_tokens, and a CRC-32 of its token ids (as int32,
// in stream order; computed once per process start by rank 0, or taken from
// the per-user cache of data/shard_cache.h while the file is unchanged). The tokens,
// not the file bytes: re-sharding the same text writes new HDF5 timestamps
// but the same data, and must not be refused. The shards' tokenizer and
// vocab are already part of the identity through the model. Keys:
//   <prefix>_shards   = the number of shards
//   <prefix>_shard_N  = "PATH tokens=N crc32=XXXXXXXX"
#pragma once
#include <map>
#include <string>

#include "data/shard_cache.h"
#include "data/token_dataset.h"

namespace ratchet {

std::map<std::string, std::string> shard_content_identity(const TokenDataset& ds,
                                                          const std::string& prefix);

// The state of ds's shard paths for `cache`, not cacheable (sig "") when a
// path no longer names the file ds has open (replaced by rename since): a
// value read through ds must not be stored under, or taken from, the new file.
ShardCache::Snapshot shard_snapshot(const ShardCache& cache, const TokenDataset& ds);

// True when `identity` (from a checkpoint) records shard contents under
// `prefix`; checkpoints written before it existed do not.
bool has_shard_content_identity(const std::map<std::string, std::string>& identity,
                                const std::string& prefix);

}  // namespace ratchet
