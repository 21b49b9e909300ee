// Weighted mixtures of training sources (issue 29, item 6).
//
//   ratchet train --train-data 'web/*.h5:0.7' --train-data 'books/*.h5:0.3'
//
// A spec is GLOB[:WEIGHT]. Only a trailing ':<number>' is a weight, so a path
// holding colons is still one glob ('run:3/x_*.h5' has no weight; 'a:b.h5:2'
// is 'a:b.h5' with weight 2). A glob that itself ends in ':<number>' is
// written with a weight after it ('x:5:1'). Weights are positive finite
// numbers, normalised to sum 1; a spec without one weighs 1. One source is
// today's single-glob loader exactly (its weight, if given, changes nothing).
//
// The draw. The run reads one stream of windows, global row g = 0, 1, 2, ...
// (row g of the step s, micro-step m, row r of the micro-batch's B·W rows is
// g = s·rows_per_step + m·B·W + r). Row g reads from source
//     source_of(g) = the s with cum[s-1] <= u(g) < cum[s],
//     u(g) = top 53 bits of splitmix64(seed', g) / 2^53,
// a counter-based hash: it depends on (seed, g) only, never on W, B or the
// accumulation, so the rows of a step are the same set on any world size.
// The k-th row drawn from source s reads that source's k-th window in its own
// order (shuffled: epoch e = k / nwin_s of a per-source permutation;
// sequential: token k·T mod N_s), exactly as a single source reads its rows.
// The cursor is (g, rows drawn per source): integers that a checkpoint keeps
// and that mean the same thing at any world size.
//
// A source runs out when its draws reach the end of its epoch (nwin_s =
// (N_s - 1) / T windows): --on-source-exhausted wrap starts its next epoch
// (as one source does); stop ends the run before the step that would need it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/token_dataset.h"

namespace ratchet {

struct SourceSpec {
  std::string pattern;   // the glob
  double weight = 1;     // as given (1 when not given)
  bool weighted = false; // a ':WEIGHT' was given
};

// Splits "GLOB[:WEIGHT]". Throws Error naming `flag` and the spec on a bad
// weight (zero, negative, NaN, infinite) or an empty glob.
SourceSpec parse_source_spec(const std::string& spec, const std::string& flag);
// All specs: each parsed, none given twice. Throws Error naming `flag`.
std::vector<SourceSpec> parse_source_specs(const std::vector<std::string>& specs,
                                           const std::string& flag);
// The text a run records for its training data (run identity, log lines):
// one source: its glob, exactly as before mixtures; several: "GLOB:W + ..."
// with the normalised weights.
std::string sources_text(const std::vector<SourceSpec>& specs);
// Weights divided by their sum.
std::vector<double> normalised_weights(const std::vector<SourceSpec>& specs);

// Which source global row g reads (see the top of this file).
class MixtureDraw {
 public:
  // `weights`: positive, any scale (normalised here).
  MixtureDraw(const std::vector<double>& weights, uint64_t seed);
  size_t source_of(uint64_t row) const;
  size_t num_sources() const { return bound_.size(); }

 private:
  uint64_t key_;
  std::vector<uint64_t> bound_;  // cumulative weights x 2^53; the last is 2^53
};

// The training sources, opened and checked to agree on the tokenizer.
class DataMixture {
 public:
  // Opens every source's shards (TokenDataset checks each source), then
  // refuses sources made with different tokenizers (naming both) and a shard
  // file that two sources share. The HDF5 cache budget is split evenly.
  DataMixture(const std::vector<std::string>& specs, const std::string& flag,
              const TokenDatasetOptions& options = {});
  ~DataMixture();

  size_t size() const { return sources_.size(); }
  const TokenDataset& source(size_t i) const { return *sources_[i]; }
  const std::string& name(size_t i) const { return specs_[i].pattern; }
  const std::vector<double>& weights() const { return weights_; }  // normalised
  const std::vector<SourceSpec>& specs() const { return specs_; }
  const std::string& flag() const { return flag_; }
  uint64_t num_tokens() const;  // all sources together

 private:
  std::string flag_;
  std::vector<SourceSpec> specs_;
  std::vector<double> weights_;
  std::vector<std::unique_ptr<TokenDataset>> sources_;
};

// "--on-source-exhausted" values.
enum class OnSourceExhausted { kWrap, kStop };
OnSourceExhausted parse_on_source_exhausted(const std::string& v);

// The shard content identity of every source, for checkpoints: one source
// as before (prefix "train"); source i > 0 under "train_src<i>".
std::map<std::string, std::string> mixture_content_identity(const DataMixture& mix);

// Entropy (nats/token) of the unigram distribution of the mixture's tokens
// as the draw weighs them: sum_s w_s p_s. Each source's counts are kept in
// the shard cache (data/shard_cache.h), so later starts skip the read.
double mixture_unigram_entropy(const DataMixture& mix, int vocab);

}  // namespace ratchet
