#include "data/token_dataset.h"

#include <glob.h>

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "data/shard_reader.h"
#include "data/shard_format.h"
#include "data/tokenizer_identity.h"

namespace ratchet {
namespace {

std::vector<std::string> expand_glob(const std::string& pattern, const std::string& flag) {
  if (pattern.empty()) fail(flag, " is empty: pass a shard file or a pattern like 'data/train_*.h5'");
  glob_t g{};
  int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOSPACE) fail("out of memory expanding ", flag, " '", pattern, "'");
  if (paths.empty())
    fail(flag, " '", pattern, "' matches no file: run `ratchet shard` first or check the path");
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

TokenDataset::TokenDataset(const std::string& pattern, const std::string& flag,
                           const TokenDatasetOptions& options)
    : pattern_(pattern), flag_(flag) {
  const std::vector<std::string> paths = expand_glob(pattern, flag);
  const size_t per_shard = options.cache_bytes / paths.size();
  for (const std::string& path : paths) {
    // Two chunks at least (a window may straddle two), as HDF5 counts bytes.
    auto file = std::make_unique<ShardFile>(path);
    const size_t chunk_bytes = (size_t)file->chunk_tokens() * (size_t)file->token_bytes();
    file->set_chunk_cache(std::max(per_shard, 2 * chunk_bytes + 1024));
    const ShardMeta& m = file->meta();
    if (shards_.empty()) {
      meta_ = m;
    } else {
      const std::string& first = shards_.front().path;
      // One tokenizer by its digest, not the path it was read from (tokenizer_identity.h).
      const std::string diff = tokenizer_difference(meta_, m);
      if (!diff.empty())
        fail("shards ", first, " and ", path, " disagree on the ", diff, ": ", flag, " '", pattern,
             "' must match shards made with one tokenizer");
    }
    if (file->num_tokens() == 0)
      fail("shard ", path, " is empty (0 tokens): remove it from ", flag, " '", pattern,
           "' or re-shard");

    uint64_t mx = 0;
    if (auto attr = file->int_attr(shard_format::kAttrMaxToken)) {
      mx = (uint64_t)*attr;
    } else if (file->num_tokens() <= kScanLimit) {
      std::vector<uint32_t> buf;
      for (uint64_t pos = 0; pos < file->num_tokens(); pos += 1 << 20) {
        uint64_t n = std::min<uint64_t>(1 << 20, file->num_tokens() - pos);
        buf.resize(n);
        file->read_tokens(pos, n, buf.data());
        mx = std::max<uint64_t>(mx, *std::max_element(buf.begin(), buf.end()));
      }
    } else {
      mx = (uint64_t)m.vocab_size - 1;  // checked on every read instead
    }
    if (mx >= (uint64_t)m.vocab_size)
      fail("shard ", path, " holds token id ", mx, " but its vocab_size is ", m.vocab_size,
           ": the shard is corrupt, re-shard it");
    max_token_ = std::max(max_token_, (uint32_t)mx);
    num_documents_ += file->num_doc_offsets();

    Shard s;
    s.path = path;
    s.start = total_;
    s.size = file->num_tokens();
    s.file = std::move(file);
    total_ += s.size;
    shards_.push_back(std::move(s));
  }
}

TokenDataset::~TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;

const TokenDataset::Shard& TokenDataset::shard_at(uint64_t pos) const {
  // The last shard whose start is <= pos.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), pos,
                             [](uint64_t p, const Shard& s) { return p < s.start; });
  return *(it - 1);
}

void TokenDataset::read(uint64_t start, size_t count, int32_t* out) const {
  uint64_t pos = start % total_;
  const int32_t vocab = meta_.vocab_size;
  while (count > 0) {
    const Shard& s = shard_at(pos);
    uint64_t off = pos - s.start;
    size_t n = (size_t)std::min<uint64_t>(count, s.size - off);
    s.file->read_tokens(off, n, out);
    for (size_t i = 0; i < n; i++)
      if (out[i] < 0 || out[i] >= vocab)
        fail("shard ", s.path, " holds token id ", (uint32_t)out[i], " at position ", off + i,
             " but its vocab_size is ", vocab, ": the shard is corrupt, re-shard it");
    out += n;
    count -= n;
    pos += n;
    if (pos == total_) pos = 0;
  }
}

void TokenDataset::check_vocab(int model_vocab) const {
  const std::string& first = shards_.front().path;
  std::string fix = model_vocab == 257 ? "re-shard with --tokenizer byte"
                                       : "re-shard with a tokenizer whose vocab fits";
  if (meta_.vocab_size > model_vocab)
    fail("shard ", first, " has vocab ", meta_.vocab_size, " but the model's vocab is ",
         model_vocab, ": pass --vocab-size ", meta_.vocab_size, " or ", fix);
  // Every id is < vocab_size (checked at open), so max_token_ < model_vocab now.
}

std::pair<uint64_t, uint64_t> TokenDataset::shard_file_id(size_t i) const {
  return shards_[i].file->file_id();
}

std::string TokenDataset::describe() const {
  std::ostringstream os;
  os << flag_ << " '" << pattern_ << "' (" << shards_.size()
     << (shards_.size() == 1 ? " shard, " : " shards, ") << total_ << " tokens, tokenizer "
     << meta_.tokenizer << ", vocab " << meta_.vocab_size << ")";
  return os.str();
}

}  // namespace ratchet
