// Whether two sets of shards hold ids of one tokenizer (issue 36, defect 2).
// A tokenizer.json is identified by the SHA-256 the shards record
// (tokenizer_json_sha256), not by the path it was read from (the `tokenizer`
// attribute, "hf:PATH"): two copies of one model directory, or shards made on
// two machines, are one tokenizer. Shards without a digest (byte, gpt2, and
// tokenizer.json shards of older ratchets) compare by name. Vocab size, EOT
// and the document framing (add_bos, add_eos, bos_token) must agree too.
#pragma once
#include <string>

#include "data/shard_format.h"

namespace ratchet {

// "" when a and b are one tokenizer; else what differs, as text that reads
// after "disagree on the ": "tokenizer ('byte' vs 'gpt2')",
// "vocab_size (257 vs 50257)", "tokenizer.json digest (ab12.. vs cd34..)"...
std::string tokenizer_difference(const ShardMeta& a, const ShardMeta& b);

// True when a and b record one tokenizer.json digest under two paths: a
// note for messages ("the same tokenizer at another path").
bool same_tokenizer_other_path(const ShardMeta& a, const ShardMeta& b);

}  // namespace ratchet
