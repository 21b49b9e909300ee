// The loaded tokenizer.json pipeline behind HfTokenizer (tokenizer/tokenizer_json.h):
// one struct per component kind, each with the Rust library's semantics.
// Sequences are flattened into vectors (a Sequence applies its members in
// order to every split, which is what a flat list does).
//   normalizers.cpp     Normalizer  (NFC, NFKC, NFD, NFKD, Replace, Prepend, Strip, Lowercase)
//   pre_tokenizers.cpp  PreTokenizer (Split, ByteLevel, Metaspace, Digits)
//   bpe_model.cpp       BpeModel    (BPE: byte_fallback, ignore_merges, fuse_unk, unk)
//   decoders.cpp        Decoder     (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace)
//   added_tokens.cpp    AddedTokens (leftmost-longest matching of added tokens)
//   load.cpp            tokenizer.json -> Engine, with refusals naming the JSON path
//   gpt2_config.cpp     GPT-2's encoder.json + vocab.bpe as an Engine
//   fast_split.cpp      hand-written splitters for Llama 3's and Qwen's regexes
//   regex.cpp, text.cpp PCRE2 wrapper; UTF-8 and the escaping of invalid bytes
// Engine::encode and HfTokenizer are in tokenizer/tokenizer_json.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/json/regex.h"

namespace ratchet {
class Gpt2Tokenizer;
}

namespace ratchet::hf {

// A literal string or a regex (the {"String": ...} / {"Regex": ...} patterns).
struct Pattern {
  std::string literal;           // used when regex is null
  std::unique_ptr<Regex> regex;  // PCRE2
  // [start, end) of the non-overlapping matches in `s` (escaped text).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const;
};

struct Normalizer {
  enum Kind { kNFC, kNFKC, kNFD, kNFKD, kReplace, kPrepend, kStrip, kLowercase } kind;
  Pattern pattern;      // Replace
  std::string content;  // Replace: the replacement; Prepend: the prefix
  bool strip_left = false, strip_right = false;  // Strip
  std::string where;  // Replace: "<tokenizer.json>: <JSON path>", for its growth bound
};
void normalize(const std::vector<Normalizer>& norms, std::string& s);

// A piece of text between stages; `origin` marks the piece that starts at
// offset 0 of the original text (Metaspace's prepend_scheme "first").
struct Piece {
  std::string_view s;
  bool origin;
};

struct PreTokenizer {
  enum Kind { kSplit, kByteLevel, kMetaspace, kDigits } kind;
  // Split
  Pattern pattern;
  enum Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  Behavior behavior = kIsolated;
  bool invert = false;
  bool gpt2_fast = false;  // Split/ByteLevel regex is GPT-2's: the hand-written splitter
  int llama3_fast = 0;     // Split regex is Llama 3's (3) or Qwen's (1): fast_split.h
  // ByteLevel
  bool add_prefix_space = false, use_regex = false;
  // Metaspace
  std::string replacement;
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;
  // Digits
  bool individual_digits = false;
};

// Runs the pre-tokenizers over one normalized segment. Pieces point into
// `segment` or into strings held by `arena`. When the last pre-tokenizer is
// ByteLevel, the pieces are raw bytes (escapes turned back into their byte).
// `escapes`: the text may hold escaped bytes (text.h); false skips looking.
void pre_tokenize(const std::vector<PreTokenizer>& pts, std::string_view segment, bool origin,
                  bool escapes, std::vector<std::unique_ptr<std::string>>& arena,
                  std::vector<Piece>* out);

struct BpeModel {
  std::vector<std::string> token_of;            // id -> token string ("" if unused)
  std::unordered_map<std::string, uint32_t> id_of;
  BpeMergeTable merges;
  size_t num_merges = 0;
  bool byte_level = false;  // pieces are raw bytes, symbols via byte_id
  uint32_t byte_id[256];    // byte_level: byte -> the id of its 1-char token (kNone if none)
  std::string byte_char[256];  // byte_level: the byte's 1-char spelling
  std::unordered_map<std::string, uint32_t> raw_id_of;  // byte_level: raw bytes -> id (ignore_merges)
  std::vector<uint32_t> bmp_id;  // !byte_level: code point < 0x10000 -> its 1-char token (kNone)
  bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
  uint32_t fallback_id[256];  // <0xXX> -> id (kNone if absent)
  int64_t unk = -1;
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  // Appends the ids of one piece.
  void tokenize(std::string_view piece, std::vector<uint32_t>& out) const;

  // Cuts before a "\u2581" (Metaspace's and SentencePiece's space) that
  // follows another character X, where no merge can join the symbol ending
  // with X and the one starting with the mark. BPE symbols only grow by
  // merges of adjacent pairs; when no pair in the table can straddle a cut,
  // the merges on either side are independent and the lowest-rank-leftmost
  // order restricted to one side is that side's own order, so tokenizing
  // the parts gives the ids of the whole. Checked at load (find_space_cuts in
  // load.cpp) from the merges: `space_cut_bad` holds every last character of
  // a left part whose right part starts with the mark (Llama 2: none; Gemma 3:
  // '>', for ">" + "\u2581</"). A symbol ending with X ends with X's own
  // character unless X has no token (byte fallback "<0xXX>", unk, or dropped
  // when there is no unk): when any character is bad, or there is no unk, X
  // must have its own token, so the symbol's last character is X. Off for byte-level
  // models (their pre-tokenizer cuts), with ignore_merges (a whole piece may
  // be a token), and with RATCHET_HF_NO_FAST_PATH.
  // tests/fuzz/fuzz_hf_space_cut.cpp and the parity tests check it.
  bool space_cut = false;
  bool space_cut_known = false;         // X must have its own token
  std::vector<uint32_t> space_cut_bad;  // sorted code points
  // The same argument between any two ASCII characters X and Y that both
  // have their own token: a cut when no merge's left part ends with X while
  // its right part starts with Y (Llama 2: "earth" | ".", "Ge" | "1"). Words
  // then part from their punctuation and numbers, so fewer pieces are new
  // (KJV, encode alone: cold 42 -> 54 MB/s). pair_cut[X * 128 + Y].
  std::vector<bool> pair_cut;
  // The end of the part that starts at `from`: the next cut after it, or s.size().
  size_t next_cut(std::string_view s, size_t from) const;
};

struct Decoder {
  enum Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace } kind;
  Pattern pattern;       // Replace
  std::string content;   // Replace: replacement; Strip: the char
  uint32_t strip_char = 0;
  size_t start = 0, stop = 0;  // Strip
  std::string replacement;     // Metaspace
  bool prepend = true;         // Metaspace: prepend_scheme != never
};
void decode_chain(const std::vector<Decoder>& decs, std::vector<std::string>& tokens);

struct AddedToken {
  std::string content;
  uint32_t id;
  bool special, normalized;
  // What is matched: the content, or for a normalized token the content put
  // through the normalizers (as the Rust library builds its normalized trie).
  std::string match;
};
// Leftmost-longest matching over a byte trie (the Rust library uses
// aho-corasick with LeftmostLongest over all added tokens, then drops the
// special matches when special tokens are encoded as text).
class AddedTokens {
 public:
  // The tokens whose `normalized` flag is `normalized`; `tokens` must outlive this.
  void build(const std::vector<AddedToken>& tokens, bool normalized);
  bool empty() const { return nodes_.size() <= 1; }
  // The leftmost-longest match at or after `from`, false when none.
  bool find(std::string_view s, size_t from, size_t* start, size_t* end,
            const AddedToken** tok) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> next;  // sorted by byte
    int64_t token = -1;                                   // index in *tokens_
  };
  std::vector<Node> nodes_;
  bool first_[256] = {};
  const std::vector<AddedToken>* tokens_ = nullptr;
};

struct Engine {
  std::string path;    // tokenizer.json ("" for GPT-2's files)
  std::string name;
  std::string sha256;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  BpeModel model;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::vector<AddedToken> added;
  std::unordered_map<uint32_t, size_t> added_index;  // id -> index in `added`
  AddedTokens raw_added, norm_added;  // matched in the raw / the normalized text
  int vocab_size = 0;
  int bos = -1, eos = -1;
  bool adds_bos = false, adds_eos = false;
  uint64_t instance = 0;  // tells this engine's per-thread cache from others'

  std::vector<uint32_t> encode(const std::string& text, bool parse_special) const;
  std::string token_string(uint32_t id) const;  // "" when none
};

// GPT-2's pre-tokenizer regex (ByteLevel's use_regex); tokenizer/gpt2_pretokenize.h
// is its hand-written fast path.
const char* gpt2_regex();
// False when $RATCHET_HF_NO_FAST_PATH is set (not "0"): every regex then runs
// in PCRE2 (tests and benchmarks compare the two; the ids are the same).
bool fast_paths_enabled();
// The whole of a vocabulary file; Error naming `what` and the path when it
// cannot be opened or read (shared with Gpt2Tokenizer's encoder.json/vocab.bpe).
// Refused by size (above max_bytes) and by kind (a loop, a directory) first.
std::string read_file(const std::string& path, const char* what,
                      uint64_t max_bytes = uint64_t(1) << 30);
// Fills the derived tables (vocab size, added-token tries, byte-level model).
void finish(Engine& e);
// Sets m.space_cut* from its merges (part of finish(); for tests and fuzzers
// that build a BpeModel by hand: token_of, id_of, bmp_id and merges filled).
void find_space_cuts(BpeModel& m);

// tokenizer.json (+ tokenizer_config.json beside it) -> Engine.
std::unique_ptr<Engine> load_engine(const std::string& path);
// GPT-2 from the tables Gpt2Tokenizer read (gpt2_config.cpp).
std::unique_ptr<Engine> gpt2_engine(const Gpt2Tokenizer& g);

}  // namespace ratchet::hf
