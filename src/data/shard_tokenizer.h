// The tokenizer a dataset's shards were made with, found again from what the
// shards record (shard_format.h): `tokenizer` ("byte", "gpt2" or
// "hf:PATH/tokenizer.json") and, for a Hugging Face tokenizer, the SHA-256 of
// its tokenizer.json. Decoding shards (inspect --decode, training samples,
// ratchet sample) and the export of a complete model directory go through
// here, so a tokenizer.json edited or replaced since the shards were made is
// never used in silence: its digest must be the recorded one.
#pragma once
#include <memory>
#include <string>

#include "data/shard_format.h"
#include "tokenizer/tokenizer.h"

namespace ratchet {

// "hf:PATH" -> PATH; "" for any other tokenizer name.
std::string hf_tokenizer_json(const std::string& tokenizer_name);

// A tokenizer.json path for a PATH argument: PATH itself, or PATH/tokenizer.json
// for a directory. No check that it exists.
std::string tokenizer_json_in(const std::string& path);

// The tokenizer of shards described by `meta`. byte and gpt2 by name (gpt2's
// files from their default place); a Hugging Face one from `path` (a
// tokenizer.json or a directory holding one) when given, else from the path
// the shards record. Error naming `flag`, the file and both digests when its
// SHA-256 is not meta.tokenizer_sha256, or when it cannot be loaded.
std::unique_ptr<Tokenizer> load_shard_tokenizer(const ShardMeta& meta, const std::string& path = "",
                                                const std::string& flag = "--tokenizer");

// The BOS and EOS ids (-1: none) of a tokenizer: a Hugging Face one's, else
// (byte, gpt2) no BOS and the end-of-text token as EOS.
int tokenizer_bos(const Tokenizer& tok);
int tokenizer_eos(const Tokenizer& tok);

}  // namespace ratchet
