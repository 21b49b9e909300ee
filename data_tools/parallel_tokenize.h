// Tokenizes many documents on several threads with a result that does not
// depend on the thread count: document i's ids always land in out[i], and a
// long document is cut into pieces only at places where the tokenizer's
// output provably does not change (a '\n' between two printable ASCII
// characters: GPT-2's pre-tokenizer always ends a piece after such a newline
// and starts afresh; bytes split anywhere), so pieces tokenized apart
// concatenate to the whole document's ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace ratchet {

// Pieces of about this many bytes are tokenized as separate tasks.
inline constexpr size_t kTokenizePieceBytes = size_t(1) << 18;

// Cut points of `text` (ascending, excluding 0 and size) into pieces of about
// `piece_bytes`; none when the tokenizer is not known to allow cutting.
std::vector<size_t> safe_cuts(const Tokenizer& tok, const std::string& text, size_t piece_bytes);

// out[i] = tok.encode(*docs[i]), computed by `threads` OpenMP threads.
void tokenize_parallel(const Tokenizer& tok, const std::vector<const std::string*>& docs,
                       int threads, std::vector<std::vector<uint32_t>>& out,
                       size_t piece_bytes = kTokenizePieceBytes);

}  // namespace ratchet
