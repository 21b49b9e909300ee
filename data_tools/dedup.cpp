#include "data_tools/dedup.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <openssl/evp.h>
#include <unordered_map>

#include "core/error.h"
#include "core/rng.h"  // mix64

namespace ratchet {
namespace {

// A shingle's hash: FNV-1a over its bytes, then mixed (see DedupSketch).
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

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

DedupSketch::DedupSketch(const DedupOptions& o) : o_(o), sha_(EVP_MD_CTX_new()) {
  if (!sha_ || EVP_DigestInit_ex((EVP_MD_CTX*)sha_, EVP_sha256(), nullptr) != 1)
    fail("cannot start a SHA-256 digest (OpenSSL)");
  whole_ = kFnvBasis;
  if (o.near) sig_.assign((size_t)o.num_perm, UINT32_MAX);
}

DedupSketch::~DedupSketch() { EVP_MD_CTX_free((EVP_MD_CTX*)sha_); }

void DedupSketch::shingle(uint64_t h) {
  for (int k = 0; k < o_.num_perm; k++) {
    uint32_t v = (uint32_t)(mix64(h ^ (0x9E3779B97F4A7C15ull * (uint64_t)(k + 1))) >> 32);
    if (v < sig_[(size_t)k]) sig_[(size_t)k] = v;
  }
}

void DedupSketch::word_end() {
  words_++;
  if (!o_.near) return;
  for (Open& s : open_) s.words++;
  if (!open_.empty() && open_.front().words == o_.ngram) {
    shingle(mix64(open_.front().h));
    open_.pop_front();
  }
}

void DedupSketch::out(char c) {
  buf_.push_back(c);
  if (buf_.size() >= (size_t(1) << 16)) {
    EVP_DigestUpdate((EVP_MD_CTX*)sha_, buf_.data(), buf_.size());
    buf_.clear();
  }
  if (!o_.near) return;
  const unsigned char b = (unsigned char)c;
  whole_ = (whole_ ^ b) * kFnvPrime;
  if (c == ' ') {
    word_end();
    word_start_ = true;
  } else if (word_start_) {
    open_.push_back({kFnvBasis, 0});
    word_start_ = false;
  }
  for (Open& s : open_) s.h = (s.h ^ b) * kFnvPrime;
}

void DedupSketch::add(std::string_view text) {
  // normalize_for_dedup, one byte at a time.
  for (char c : text) {
    if (is_space(c)) {
      pending_space_ = emitted_;
      continue;
    }
    if (pending_space_) out(' ');
    pending_space_ = false;
    out(c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c);
    emitted_ = true;
  }
}

void DedupSketch::finish() {
  if (!buf_.empty()) EVP_DigestUpdate((EVP_MD_CTX*)sha_, buf_.data(), buf_.size());
  unsigned char d[32];
  unsigned int n = 0;
  EVP_DigestFinal_ex((EVP_MD_CTX*)sha_, d, &n);
  std::memcpy(digest_.data(), d, 16);
  if (!o_.near) return;
  if (emitted_) word_end();
  if ((int64_t)words_ <= o_.ngram) {  // too few words: one shingle, the whole text
    sig_.assign((size_t)o_.num_perm, UINT32_MAX);
    shingle(mix64(whole_));
  }
}

OnlineDedup::OnlineDedup(const DedupOptions& o) : o_(o) {
  if (o.near && !(o.threshold > 0 && o.threshold <= 1))
    fail("--near-dup-threshold ", o.threshold, " is outside (0, 1]: pass e.g. 0.8");
  if (o.num_perm <= 0 || o.ngram <= 0) fail("dedup: num_perm and ngram must be positive");
  if (o.near) {
    choose_bands(o.num_perm, o.threshold, &bands, &rows);
    tables_.resize((size_t)bands);
  }
}

bool OnlineDedup::add(size_t doc, const DedupSketch& s, DedupRemoval* removal) {
  if (o_.exact) {
    auto [it, inserted] = exact_.emplace(s.digest(), doc);
    if (!inserted) {
      *removal = {doc, it->second, false, 1.0};
      return true;
    }
  }
  if (!o_.near) return false;
  const std::vector<uint32_t>& sig = s.signature();
  std::vector<uint64_t> keys((size_t)bands);
  std::vector<size_t> cand;
  for (int b = 0; b < bands; b++) {
    uint64_t h = 0x12345;
    for (int k = 0; k < rows; k++) h = mix64(h ^ sig[(size_t)(b * rows + k)]);
    keys[(size_t)b] = h;
    auto it = tables_[(size_t)b].find(h);
    if (it != tables_[(size_t)b].end()) cand.insert(cand.end(), it->second.begin(), it->second.end());
  }
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  double best = -1;
  size_t best_j = 0;
  for (size_t j : cand) {
    const std::vector<uint32_t>& other = sigs_.at(j);
    int eq = 0;
    for (int k = 0; k < o_.num_perm; k++) eq += sig[(size_t)k] == other[(size_t)k];
    double sim = (double)eq / o_.num_perm;
    if (sim > best) best = sim, best_j = j;
  }
  if (best >= o_.threshold) {
    *removal = {doc, best_j, true, best};
    return true;
  }
  for (int b = 0; b < bands; b++) tables_[(size_t)b][keys[(size_t)b]].push_back(doc);
  sigs_.emplace(doc, sig);
  return false;
}

DedupResult deduplicate(const std::vector<std::string_view>& docs, const DedupOptions& o) {
  OnlineDedup online(o);  // checks the options
  const size_t n = docs.size();
  DedupResult r;
  r.removed.assign(n, false);
  r.bands = online.bands;
  r.rows = online.rows;
  // Sketches in parallel (each i writes only its own), decisions in order.
  std::vector<std::unique_ptr<DedupSketch>> sk(n);
  parallel_for(n, o.threads, [&](size_t i) {
    sk[i] = std::make_unique<DedupSketch>(o);
    sk[i]->add(docs[i]);
    sk[i]->finish();
  });
  for (size_t i = 0; i < n; i++) {
    DedupRemoval m;
    if (!online.add(i, *sk[i], &m)) continue;
    r.removed[i] = true;
    r.removals.push_back(m);
    (m.near ? r.near_removed : r.exact_removed)++;
  }
  return r;
}

}  // namespace ratchet
