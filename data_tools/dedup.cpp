#include "data_tools/dedup.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <unordered_map>

#include "core/error.h"
#include "core/rng.h"  // mix64

namespace ratchet {
namespace {

// FNV-1a, then mixed: a stable 64-bit hash of bytes.
uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::vector<uint32_t> minhash(std::string_view norm, int num_perm, int ngram) {
  // Word boundaries of the normalized text (single spaces).
  std::vector<std::string_view> words;
  for (size_t i = 0; i < norm.size();) {
    size_t j = norm.find(' ', i);
    if (j == std::string_view::npos) j = norm.size();
    words.push_back(norm.substr(i, j - i));
    i = j + 1;
  }
  std::vector<uint64_t> shingles;
  if ((int)words.size() <= ngram) {
    shingles.push_back(hash_bytes(norm));
  } else {
    for (size_t i = 0; i + ngram <= words.size(); i++) {
      const char* a = words[i].data();
      const char* b = words[i + ngram - 1].data() + words[i + ngram - 1].size();
      shingles.push_back(hash_bytes(std::string_view(a, (size_t)(b - a))));
    }
    std::sort(shingles.begin(), shingles.end());
    shingles.erase(std::unique(shingles.begin(), shingles.end()), shingles.end());
  }
  std::vector<uint32_t> sig((size_t)num_perm, UINT32_MAX);
  for (uint64_t s : shingles)
    for (int k = 0; k < num_perm; k++) {
      uint32_t h = (uint32_t)(mix64(s ^ (0x9E3779B97F4A7C15ull * (uint64_t)(k + 1))) >> 32);
      if (h < sig[(size_t)k]) sig[(size_t)k] = h;
    }
  return sig;
}

// fn(i) for i in [0, n) on `threads` OpenMP threads; each i writes only its
// own slot, so the result does not depend on the thread count.
template <typename Fn>
void parallel_for(size_t n, int threads, Fn fn) {
#pragma omp parallel for schedule(dynamic, 16) num_threads(std::max(1, threads))
  for (std::ptrdiff_t i = 0; i < (std::ptrdiff_t)n; i++) fn((size_t)i);
}

}  // namespace

std::string normalize_for_dedup(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (char c : text) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c);
  }
  return out;
}

void choose_bands(int num_perm, double threshold, int* bands, int* rows) {
  *bands = num_perm;
  *rows = 1;
  double best = -1;
  for (int r = 1; r <= num_perm; r++) {
    if (num_perm % r) continue;
    int b = num_perm / r;
    double t = std::pow(1.0 / b, 1.0 / r);
    if (t <= threshold && t > best) {
      best = t;
      *bands = b;
      *rows = r;
    }
  }
}

DedupResult deduplicate(const std::vector<std::string_view>& docs, const DedupOptions& o) {
  if (o.near && !(o.threshold > 0 && o.threshold <= 1))
    fail("--near-dup-threshold ", o.threshold, " is outside (0, 1]: pass e.g. 0.8");
  if (o.num_perm <= 0 || o.ngram <= 0) fail("dedup: num_perm and ngram must be positive");
  const size_t n = docs.size();
  DedupResult r;
  r.removed.assign(n, false);
  std::vector<std::string> norm(n);
  parallel_for(n, o.threads, [&](size_t i) { norm[i] = normalize_for_dedup(docs[i]); });

  if (o.exact) {
    std::unordered_map<uint64_t, std::vector<size_t>> seen;  // hash -> kept docs
    for (size_t i = 0; i < n; i++) {
      auto& bucket = seen[hash_bytes(norm[i])];
      bool dup = false;
      for (size_t j : bucket)
        if (norm[j] == norm[i]) {
          r.removed[i] = true;
          r.removals.push_back({i, j, false, 1.0});
          r.exact_removed++;
          dup = true;
          break;
        }
      if (!dup) bucket.push_back(i);
    }
  }

  if (o.near) {
    choose_bands(o.num_perm, o.threshold, &r.bands, &r.rows);
    std::vector<std::vector<uint32_t>> sig(n);
    parallel_for(n, o.threads, [&](size_t i) {
      if (!r.removed[i]) sig[i] = minhash(norm[i], o.num_perm, o.ngram);
    });
    std::vector<std::unordered_map<uint64_t, std::vector<size_t>>> tables((size_t)r.bands);
    std::vector<size_t> cand;
    for (size_t i = 0; i < n; i++) {
      if (r.removed[i]) continue;
      std::vector<uint64_t> keys((size_t)r.bands);
      cand.clear();
      for (int b = 0; b < r.bands; b++) {
        uint64_t h = 0x12345;
        for (int k = 0; k < r.rows; k++) h = mix64(h ^ sig[i][(size_t)(b * r.rows + k)]);
        keys[(size_t)b] = h;
        auto it = tables[(size_t)b].find(h);
        if (it != tables[(size_t)b].end()) cand.insert(cand.end(), it->second.begin(), it->second.end());
      }
      std::sort(cand.begin(), cand.end());
      cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
      double best = -1;
      size_t best_j = 0;
      for (size_t j : cand) {
        int eq = 0;
        for (int k = 0; k < o.num_perm; k++) eq += sig[i][(size_t)k] == sig[j][(size_t)k];
        double sim = (double)eq / o.num_perm;
        if (sim > best) best = sim, best_j = j;
      }
      if (best >= o.threshold) {
        r.removed[i] = true;
        r.removals.push_back({i, best_j, true, best});
        r.near_removed++;
        continue;
      }
      for (int b = 0; b < r.bands; b++) tables[(size_t)b][keys[(size_t)b]].push_back(i);
    }
    std::sort(r.removals.begin(), r.removals.end(),
              [](const DedupRemoval& a, const DedupRemoval& b) { return a.doc < b.doc; });
  }
  return r;
}

}  // namespace ratchet
