// The tokenizer.json engine's piece -> ids cache (the Rust library's BPE keeps
// a word cache too): text repeats its words, so most pieces are looked up,
// not merged. One open-addressing table per thread, keyed by the piece's
// bytes: a hit is one hash of the piece, one slot, and one memcmp against
// the entry (its ids, then its bytes, side by side in one arena), with no
// allocation. Bounded: at kMaxEntries pieces or kMaxArenaWords of arena it
// is emptied and refills with what the text uses now (a corpus' frequent
// words come back within a few kilobytes).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ratchet::hf {

class PieceCache {
 public:
  // Pieces longer than this are not cached (they are rarely repeated).
  static constexpr size_t kMaxPiece = 128;
  static constexpr size_t kMaxEntries = size_t(1) << 17;

  // 64-bit hash of a short piece: 8 bytes at a time, multiply-xorshift.
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
      h ^= h >> 29;
    }
    if (i < s.size()) {
      uint64_t w = 0;
      std::memcpy(&w, s.data() + i, s.size() - i);
      h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
      h ^= h >> 29;
    }
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
  }

  // The cached ids of `s` (hash h = hash(s)) and their count, or null.
  const uint32_t* find(std::string_view s, uint64_t h, size_t* n) const {
    if (slots_.empty()) return nullptr;
    const uint32_t t = tag(h);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& e = slots_[i];
      if (e.tag == 0) return nullptr;
      if (e.tag == t && e.key_len == s.size()) {
        const uint32_t* ids = arena_.data() + e.off;
        if (std::memcmp(ids + e.n_ids, s.data(), s.size()) == 0) {
          *n = e.n_ids;
          return ids;
        }
      }
    }
  }

  // Adds `s` -> ids[0, n); s.size() <= kMaxPiece, n <= 65535, not present.
  void insert(std::string_view s, uint64_t h, const uint32_t* ids, size_t n) {
    if (slots_.empty() || entries_ >= kMaxEntries || arena_.size() >= kMaxArenaWords) clear();
    size_t i = h & mask_;
    while (slots_[i].tag != 0) i = (i + 1) & mask_;
    const size_t off = arena_.size();
    slots_[i] = Slot{tag(h), (uint32_t)off, (uint16_t)s.size(), (uint16_t)n};
    arena_.resize(off + n + (s.size() + 3) / 4);
    std::memcpy(arena_.data() + off, ids, n * sizeof(uint32_t));
    std::memcpy(arena_.data() + off + n, s.data(), s.size());
    entries_++;
  }

  void clear() {
    slots_.assign(kMaxEntries * 2, Slot{});  // load factor at most 1/2
    mask_ = slots_.size() - 1;
    arena_.clear();
    entries_ = 0;
  }

 private:
  // 12 bytes: the slots of a full cache (3 MiB) mostly stay in L2/L3.
  struct Slot {
    uint32_t tag = 0;  // the hash's top half, never 0; 0: empty
    uint32_t off = 0;  // in arena_: the ids, then the piece's bytes (one or two cache lines)
    uint16_t key_len = 0, n_ids = 0;
  };
  static constexpr size_t kMaxArenaWords = size_t(16) << 20;  // 64 MiB at most
  static uint32_t tag(uint64_t h) { return (uint32_t)(h >> 32) | 1; }
  std::vector<Slot> slots_;
  size_t mask_ = 0, entries_ = 0;
  std::vector<uint32_t> arena_;
};

}  // namespace ratchet::hf
