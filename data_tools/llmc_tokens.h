// llm.c's token shard format (dev/data/data_common.py in karpathy/llm.c):
//   header: 256 int32 (little-endian): [0] magic 20240520, [1] version 1,
//           [2] number of tokens; the rest zero
//   body:   the tokens as uint16 (version 1; GPT-2's vocab fits)
// llm.c puts the end-of-text token BEFORE each document; ratchet puts it
// after. Conversion keeps the token stream exactly as it is (so a round trip
// is byte-identical) and derives ratchet's /doc_offsets from it: a document
// starts at 0 and after every end-of-text token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr size_t kLlmcHeaderInts = 256;

// True when the file starts with llm.c's magic number.
bool is_llmc_tokens_file(const std::string& path);

// Reads a whole llm.c token file. Throws Error naming the file on a bad
// magic or version, a header count that disagrees with the file size
// (truncated or padded), or a read error.
std::vector<uint32_t> read_llmc_tokens(const std::string& path);

// Writes tokens (each < 65536) as an llm.c token file, via a temporary name
// and rename. Throws Error naming the file.
void write_llmc_tokens(const std::string& path, const std::vector<uint32_t>& tokens);

// Document starts in ratchet's sense: 0 and every position after an eot
// (below tokens.size()).
std::vector<uint64_t> doc_offsets_from_eot(const std::vector<uint32_t>& tokens, uint32_t eot);

}  // namespace ratchet
