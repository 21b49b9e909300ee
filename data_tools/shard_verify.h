// Deep verification of token shards (`ratchet verify`): everything ShardFile
// checks at open (schema, format, version, attribute types), plus
//  - num_tokens / num_documents attributes equal the datasets' lengths,
//  - /doc_offsets strictly increasing and inside [0, num_tokens),
//  - every chunk of /tokens readable (decompresses) and every id < vocab_size,
//  - max_token, when present, equal to the largest id,
//  - source_files / source_sha256 (and tokenizer_*) of equal length,
//  - the recorded framing holds: BOS at every document start (add_bos), EOS
//    before every document start but the shard's first token (add_eos),
//  - all shards agree on tokenizer, vocab_size, eot_token, the tokenizer.json
//    digest and the framing.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/shard_format.h"

namespace ratchet {

struct ShardCheck {
  std::string path;
  bool ok = false;
  std::string problem;  // the first problem found, naming the file and where
  uint64_t tokens = 0, documents = 0, chunks = 0;
  ShardMeta meta;
};

// Verifies one shard (no cross-shard checks).
ShardCheck verify_shard(const std::string& path);
// Verifies each, then the cross-shard agreement (a disagreeing shard is
// marked failed, naming the first shard). `on_result` is called per shard.
std::vector<ShardCheck> verify_shards(const std::vector<std::string>& paths,
                                      const std::function<void(const ShardCheck&)>& on_result = {});

}  // namespace ratchet
