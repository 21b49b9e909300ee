// Training matches its data (issue 29): the model's tokenizer is the one the
// shards were made with, and a Hugging Face export carries it.
//
//  - --init-from a Hugging Face directory: its tokenizer.json's SHA-256 must
//    be the shards' `tokenizer_json_sha256` (or a mismatch is refused, naming
//    both digests, unless --allow-tokenizer-mismatch).
//  - --export-hf: the tokenizer files (tokenizer.json, tokenizer_config.json,
//    special_tokens_map.json) are copied beside the weights from the
//    directory of the shards' tokenizer.json, or of --init-from's, whichever
//    holds the tokenizer.json whose digest the shards record.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "data/shard_format.h"

namespace ratchet {

// The directory of a Hugging Face --init-from PATH (PATH itself, or the
// directory of PATH.safetensors); "" when PATH is not Hugging Face.
std::string hf_init_dir(const std::string& init_from);

// --init-from INIT against shards `data` (described by `data_flag`, e.g.
// "--train-data 'd/train_*.h5'"). Returns what to log ("" for nothing);
// Error naming both digests on a mismatch unless `allow_mismatch` (then the
// returned line is a warning).
std::string check_init_tokenizer(const std::string& init_from, const ShardMeta& data,
                                 const std::string& data_flag, bool allow_mismatch);

// Where --export-hf takes the tokenizer files from: a directory holding the
// tokenizer.json whose digest the shards record ("" when none: *why says why).
std::string export_tokenizer_source(const std::string& init_from, const ShardMeta& data,
                                    std::string* why);

// The same for a checkpoint (`ratchet ckpt export --format hf`): its run
// identity names its first training shard (train_shard_0), whose recorded
// tokenizer is looked up as above.
std::string checkpoint_tokenizer_source(const std::map<std::string, std::string>& identity,
                                        std::string* why);

// Copies the tokenizer files present in `src` into `dir` (each atomically);
// returns their names.
std::vector<std::string> copy_tokenizer_files(const std::string& src, const std::string& dir);

// The token a training sample starts from: BOS when the shards start their
// documents with it, else the end-of-text token.
int sample_start_token(const ShardMeta& data);

}  // namespace ratchet
