#include "data/mixture.h"
#include "data/tokenizer_identity.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "data/shard_cache.h"
#include "data/shard_identity.h"

namespace ratchet {

namespace {

// A spec's text goes into checkpoints (INI lines), ledger.json and the JSONL
// log (JSON keys): control characters and invalid UTF-8 are refused up front
// rather than breaking one of those later.
void check_printable(const std::string& spec, const std::string& flag) {
  for (unsigned char c : spec)
    if (c < 0x20 || c == 0x7f)
      fail(flag, " holds a control character (byte 0x", "0123456789abcdef"[c >> 4],
           "0123456789abcdef"[c & 15], "): give a shard glob, e.g. ", flag, " 'web/*.h5:0.7'");
  for (size_t i = 0; i < spec.size();) {
    const unsigned char c = spec[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= spec.size();
    for (size_t k = 1; ok && k < n; k++) ok = ((unsigned char)spec[i + k] >> 6) == 2;
    if (!ok)
      fail(flag, " '", spec.substr(0, i), "...' is not valid UTF-8 at byte ", i,
           ": source names are written to JSON logs; rename the files or use a glob around the byte");
    i += n;
  }
}

// The shortest text that reads back as w exactly (0.7, not 0.69999999999999996).
std::string weight_text(double w) {
  char buf[32];
  for (int p = 1; p <= 17; p++) {
    std::snprintf(buf, sizeof buf, "%.*g", p, w);
    if (std::strtod(buf, nullptr) == w) break;
  }
  return buf;
}

}  // namespace

SourceSpec parse_source_spec(const std::string& spec, const std::string& flag) {
  if (spec.empty()) fail(flag, " is empty: pass a shard file or a pattern like 'data/train_*.h5'");
  check_printable(spec, flag);
  SourceSpec s;
  s.pattern = spec;
  const size_t colon = spec.rfind(':');
  if (colon != std::string::npos && colon + 1 < spec.size()) {
    // Only a suffix that is wholly a number is a weight (strtod's syntax,
    // so 'nan' and 'inf' are weights, and refused as such below).
    const std::string tail = spec.substr(colon + 1);
    const char* p = tail.c_str();
    char* end = nullptr;
    errno = 0;
    const double w = std::strtod(p, &end);
    if (end != p && *end == '\0') {
      s.pattern = spec.substr(0, colon);
      s.weight = w;
      s.weighted = true;
      // Decimal only (issue 36): strtod also reads hex ('0x10' is 16).
      const bool decimal = tail.find_first_not_of("0123456789.eE+-") == std::string::npos &&
                           tail.find_first_of("0123456789") != std::string::npos;
      if (!decimal && std::isfinite(w))
        fail(flag, " '", spec, "': the weight '", tail, "' is not a decimal number: write it ",
             "in decimal, e.g. 'web/*.h5:0.7' (hexadecimal and other forms are not read)");
      if (!(std::isfinite(w) && w > 0))
        fail(flag, " '", spec, "': the weight '", tail, "' must be a positive finite number (",
             "weights are relative: 'web/*.h5:0.7' and 'books/*.h5:0.3', or 7 and 3)");
    }
  }
  if (s.pattern.empty())
    fail(flag, " '", spec, "' has no glob before its weight: pass e.g. 'data/train_*.h5:0.5'");
  return s;
}

std::vector<SourceSpec> parse_source_specs(const std::vector<std::string>& specs,
                                           const std::string& flag) {
  std::vector<SourceSpec> out;
  for (const std::string& spec : specs) {
    SourceSpec s = parse_source_spec(spec, flag);
    for (const SourceSpec& o : out)
      if (o.pattern == s.pattern)
        fail(flag, " names the source '", s.pattern, "' twice: give each glob once, with its "
             "whole weight");
    out.push_back(std::move(s));
  }
  double sum = 0;
  for (const SourceSpec& s : out) sum += s.weight;
  if (!std::isfinite(sum))
    fail(flag, " weights sum to ", sum, ": give them on a smaller scale (they are relative: "
         "0.7 and 0.3, or 7 and 3)");
  // MixtureDraw gives each source a share of 2^53 draws: a weight under one
  // such share of the sum would never be drawn (issue 36: 1e-320 was accepted).
  for (const SourceSpec& s : out)
    if (s.weight / sum * 9007199254740992.0 < 1.0)
      fail(flag, " '", s.pattern, "': its weight ", weight_text(s.weight),
           " is too small beside the weights' sum ", weight_text(sum),
           " ever to be drawn (under 2^-53 of the draws): raise it or drop the source");
  return out;
}

std::vector<double> normalised_weights(const std::vector<SourceSpec>& specs) {
  double sum = 0;
  for (const SourceSpec& s : specs) sum += s.weight;
  std::vector<double> w;
  for (const SourceSpec& s : specs) w.push_back(s.weight / sum);
  return w;
}

std::string sources_text(const std::vector<SourceSpec>& specs) {
  if (specs.size() == 1) return specs[0].pattern;  // the single-glob run's identity, unchanged
  const std::vector<double> w = normalised_weights(specs);
  std::string out;
  for (size_t i = 0; i < specs.size(); i++)
    out += (i ? " + " : "") + specs[i].pattern + ":" + weight_text(w[i]);
  return out;
}

MixtureDraw::MixtureDraw(const std::vector<double>& weights, uint64_t seed)
    : key_(mix64(seed ^ 0x6D69787475726573ull)) {  // "mixtures": apart from the shuffle's streams
  double sum = 0;
  for (double w : weights) sum += w;
  RATCHET_ASSERT(!weights.empty() && sum > 0);
  // Integer bounds: the choice is exact integer arithmetic on every platform.
  const double scale = 9007199254740992.0;  // 2^53
  double cum = 0;
  for (size_t i = 0; i < weights.size(); i++) {
    cum += weights[i];
    bound_.push_back(i + 1 == weights.size() ? (uint64_t)1 << 53
                                             : (uint64_t)std::min(scale, std::floor(cum / sum * scale)));
  }
}

size_t MixtureDraw::source_of(uint64_t row) const {
  // splitmix64's output for counter `row` under key_: Rng(key_) after row+1 draws.
  const uint64_t u = mix64(key_ + (row + 1) * 0x9E3779B97F4A7C15ull) >> 11;  // 53 bits
  const size_t n = bound_.size();
  for (size_t s = 0; s + 1 < n; s++)
    if (u < bound_[s]) return s;
  return n - 1;
}

DataMixture::DataMixture(const std::vector<std::string>& specs, const std::string& flag,
                         const TokenDatasetOptions& options)
    : flag_(flag), specs_(parse_source_specs(specs, flag)), weights_(normalised_weights(specs_)) {
  if (specs_.empty()) fail(flag, " is required (a glob of HDF5 token shards)");
  TokenDatasetOptions per = options;
  per.cache_bytes = options.cache_bytes / specs_.size();
  for (const SourceSpec& s : specs_)
    sources_.push_back(std::make_unique<TokenDataset>(s.pattern, flag, per));
  const TokenDataset& a = *sources_[0];
  for (size_t i = 1; i < sources_.size(); i++) {
    const TokenDataset& b = *sources_[i];
    // One tokenizer by its digest, not the path it was read from (tokenizer_identity.h).
    const std::string diff = tokenizer_difference(a.meta(), b.meta());
    if (!diff.empty())
      fail(flag, " sources '", name(0), "' and '", name(i), "' disagree on the ", diff,
           ": they were made with different tokenizers, and one model reads one vocabulary; "
           "re-shard one of them with the other's --tokenizer (and --add-bos/--add-eos)");
  }
  // One file in two sources would be drawn under two weights at once.
  std::map<std::pair<uint64_t, uint64_t>, size_t> owner;
  for (size_t i = 0; i < sources_.size(); i++)
    for (size_t k = 0; k < sources_[i]->num_shards(); k++) {
      const auto [it, fresh] = owner.emplace(sources_[i]->shard_file_id(k), i);
      if (!fresh && it->second != i)
        fail(flag, " sources '", name(it->second), "' and '", name(i), "' both hold the shard ",
             sources_[i]->shard_path(k), ": make the globs disjoint");
    }
}

DataMixture::~DataMixture() = default;

uint64_t DataMixture::num_tokens() const {
  uint64_t n = 0;
  for (const auto& s : sources_) n += s->num_tokens();
  return n;
}

OnSourceExhausted parse_on_source_exhausted(const std::string& v) {
  if (v == "wrap") return OnSourceExhausted::kWrap;
  if (v == "stop") return OnSourceExhausted::kStop;
  fail("--on-source-exhausted must be wrap or stop (got '", v, "'): wrap starts the source's next "
       "epoch, stop saves and ends the run (exit 0) before a source would repeat a window");
}

std::map<std::string, std::string> mixture_content_identity(const DataMixture& mix) {
  std::map<std::string, std::string> id = shard_content_identity(mix.source(0), "train");
  for (size_t i = 1; i < mix.size(); i++)
    for (auto& kv : shard_content_identity(mix.source(i), "train_src" + std::to_string(i)))
      id.insert(kv);
  return id;
}

namespace {

// Token counts of one source: "id:count,..." (non-zero ones) in the cache.
std::vector<uint64_t> unigram_counts(const TokenDataset& ds, int vocab) {
  const ShardCache cache;
  const std::string kind = "unigram-counts vocab=" + std::to_string(vocab);
  const ShardCache::Snapshot snap = shard_snapshot(cache, ds);  // before reading
  std::vector<uint64_t> counts(vocab, 0);
  if (const auto v = cache.lookup(kind, snap)) {
    std::istringstream in(*v);
    std::string item;
    uint64_t total = 0;
    bool ok = true;
    while (ok && std::getline(in, item, ',')) {
      unsigned long long id = 0, n = 0;
      ok = std::sscanf(item.c_str(), "%llu:%llu", &id, &n) == 2 && id < (unsigned long long)vocab;
      if (ok) counts[id] += n, total += n;
    }
    if (ok && total == ds.num_tokens()) return counts;
    std::fill(counts.begin(), counts.end(), 0);  // a damaged entry: count again
  }
  std::vector<int32_t> buf(1 << 20);
  for (uint64_t pos = 0; pos < ds.num_tokens(); pos += buf.size()) {
    const size_t n = (size_t)std::min<uint64_t>(buf.size(), ds.num_tokens() - pos);
    ds.read(pos, n, buf.data());
    for (size_t i = 0; i < n; i++) counts[buf[i]]++;
  }
  std::string text;
  for (int id = 0; id < vocab; id++)
    if (counts[id])
      text += (text.empty() ? "" : ",") + std::to_string(id) + ":" + std::to_string(counts[id]);
  cache.store(kind, snap, text);
  return counts;
}

}  // namespace

double mixture_unigram_entropy(const DataMixture& mix, int vocab) {
  std::vector<double> p(vocab, 0.0);
  for (size_t s = 0; s < mix.size(); s++) {
    const std::vector<uint64_t> c = unigram_counts(mix.source(s), vocab);
    const double total = (double)mix.source(s).num_tokens();
    for (int id = 0; id < vocab; id++) p[id] += mix.weights()[s] * (double)c[id] / total;
  }
  double h = 0;
  for (double q : p)
    if (q > 0) h -= q * std::log(q);
  return h;
}

}  // namespace ratchet
