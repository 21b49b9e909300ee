// The BPE model of the tokenizer.json engine (see engine.h): the Rust
// library's BPE::merge_word around the shared merge loop (tokenizer/bpe_merge.h).
#include <algorithm>
#include <cstring>

#include "tokenizer/json/engine.h"
#include "tokenizer/json/text.h"
#include "tokenizer/json/unknown_counts.h"

namespace ratchet::hf {

UnknownCounts& thread_unknown_counts() {
  thread_local UnknownCounts counts;
  return counts;
}

void BpeModel::tokenize(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {  // a piece that is a token is that token
    const auto& table = byte_level ? raw_id_of : id_of;
    auto it = table.find(std::string(piece));
    if (it != table.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<uint32_t> w;
  w.reserve(piece.size());
  // An unknown unit waiting to be emitted (fuse_unk grows it), as in merge_word.
  bool unk_pending = false;
  auto flush_unk = [&] {
    if (unk_pending) w.push_back((uint32_t)unk);
    unk_pending = false;
  };
  // A unit (one char, or one byte's char for byte-level) not in the vocabulary.
  auto unknown = [&](std::string_view s, int raw_byte) {
    if (byte_fallback) {
      uint32_t ids[4];
      size_t n = 0;
      bool all = true;
      if (raw_byte >= 0) {
        ids[n++] = fallback_id[raw_byte];
        all = ids[0] != kNone;
      } else {
        for (unsigned char b : s) {
          ids[n++] = fallback_id[b];
          if (fallback_id[b] == kNone) all = false;
        }
      }
      if (all) {  // (merge_word adds these without flushing a pending unk)
        w.insert(w.end(), ids, ids + n);
        return;
      }
    }
    UnknownCounts& counts = thread_unknown_counts();  // reported by `shard` (issue 36)
    if (unk < 0) {  // no unk token: the Rust library drops the unit
      counts.dropped_chars++;
      return;
    }
    counts.unk_bytes += byte_level || raw_byte >= 0 ? 1 : s.size();
    if (unk_pending && fuse_unk) return;
    flush_unk();
    unk_pending = true;
  };
  if (byte_level) {
    for (unsigned char b : piece) {
      if (byte_id[b] != kNone) {
        flush_unk();
        w.push_back(byte_id[b]);
      } else {
        unknown(byte_char[b], -1);
      }
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      uint32_t cp;
      int n = next_cp(piece, i, &cp);
      std::string_view s = piece.substr(i, (size_t)n);
      if (is_escape(cp)) {
        unknown(s, escaped_byte(cp));
      } else if (cp < bmp_id.size() && bmp_id[cp] != kNone) {
        flush_unk();
        w.push_back(bmp_id[cp]);
      } else {
        auto it = id_of.find(std::string(s));
        if (it != id_of.end()) {
          flush_unk();
          w.push_back(it->second);
        } else {
          unknown(s, -1);
        }
      }
      i += (size_t)n;
    }
  }
  flush_unk();
  bpe_merge(w, merges);
  out.insert(out.end(), w.begin(), w.end());
}

size_t BpeModel::next_cut(std::string_view s, size_t from) const {
  const bool pairs = !pair_cut.empty();
  for (size_t q = from + 1; q < s.size(); q++) {
    const unsigned char y = (unsigned char)s[q];
    if (y < 0x80) {  // two ASCII characters: the pair table
      const unsigned char x = (unsigned char)s[q - 1];
      if (pairs && x < 0x80 && pair_cut[x * 128 + y]) return q;
      continue;
    }
    // The mark U+2581 is E2 96 81.
    if (y != 0xE2 || q + 3 > s.size() || (unsigned char)s[q + 1] != 0x96 ||
        (unsigned char)s[q + 2] != 0x81)
      continue;
    // The character before the mark.
    size_t k = q - 1;
    while (k > from && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t x;
    if (next_cp(s, k, &x) != (int)(q - k)) continue;  // not a whole character: no cut
    if (x == 0x2581) continue;                        // inside a run of marks
    if (std::binary_search(space_cut_bad.begin(), space_cut_bad.end(), x)) continue;
    if (space_cut_known) {
      if (is_escape(x)) continue;
      // (as tokenize() looks a character up)
      if (!(x < bmp_id.size() && bmp_id[x] != kNone) &&
          id_of.find(std::string(s.substr(k, q - k))) == id_of.end())
        continue;
    }
    return q;
  }
  return s.size();
}

}  // namespace ratchet::hf
