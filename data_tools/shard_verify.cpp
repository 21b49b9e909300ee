#include "data_tools/shard_verify.h"

#include <algorithm>

#include "core/error.h"
#include "data/shard_reader.h"
#include "data/tokenizer_identity.h"

namespace ratchet {
namespace sf = shard_format;

ShardCheck verify_shard(const std::string& path) {
  ShardCheck c;
  c.path = path;
  try {
    ShardFile f(path);
    c.meta = f.meta();
    c.tokens = f.num_tokens();
    const uint64_t ndoc = f.num_doc_offsets();
    c.documents = ndoc;
    if (auto n = f.int_attr(sf::kAttrNumTokens); !n)
      fail("shard ", path, " has no 'num_tokens' attribute");
    if (auto n = f.int_attr(sf::kAttrNumDocuments); !n)
      fail("shard ", path, " has no 'num_documents' attribute");
    else if ((uint64_t)*n != ndoc)
      fail("shard ", path, " says num_documents = ", *n, " but /doc_offsets holds ", ndoc);
    // Offsets, in blocks (kept when the shard records its framing: checked
    // against the tokens below).
    const uint64_t kBlock = uint64_t(1) << 20;
    uint64_t prev = 0;
    std::vector<uint64_t> starts;
    for (uint64_t s = 0; s < ndoc; s += kBlock) {
      std::vector<uint64_t> off = f.read_doc_offsets(s, std::min(kBlock, ndoc - s));
      if (c.meta.framed) starts.insert(starts.end(), off.begin(), off.end());
      for (size_t i = 0; i < off.size(); i++) {
        uint64_t k = s + i;
        if (off[i] >= c.tokens)
          fail("shard ", path, ": doc_offsets[", k, "] = ", off[i], " is outside [0, ",
               c.tokens, ")");
        if (k > 0 && off[i] <= prev)
          fail("shard ", path, ": doc_offsets[", k, "] = ", off[i],
               " is not greater than doc_offsets[", k - 1, "] = ", prev);
        prev = off[i];
      }
    }
    // Tokens, chunk by chunk.
    const uint64_t step = f.chunk_tokens() ? f.chunk_tokens() : kBlock;
    std::vector<uint32_t> buf;
    uint64_t mx = 0;
    // Framing: each document start holds BOS (add_bos), and the token before
    // it EOS (add_eos); next_start walks `starts` along the chunks.
    size_t next_bos = 0, next_eos = 0;
    const uint32_t bos = (uint32_t)c.meta.bos_token, eos = (uint32_t)c.meta.eot_token;
    for (uint64_t s = 0; s < c.tokens; s += step) {
      const uint64_t n = std::min(step, c.tokens - s);
      buf.resize(n);
      try {
        f.read_tokens(s, n, buf.data());
      } catch (const Error& e) {
        fail("shard ", path, ": chunk ", s / step, " (tokens [", s, ", ", s + n,
             ")) is unreadable: ", e.what());
      }
      for (size_t i = 0; i < n; i++) {
        if (buf[i] >= (uint32_t)c.meta.vocab_size)
          fail("shard ", path, ": token ", s + i, " is ", buf[i], ", not below vocab_size ",
               c.meta.vocab_size);
        mx = std::max<uint64_t>(mx, buf[i]);
      }
      for (; c.meta.add_bos && next_bos < starts.size() && starts[next_bos] < s + n; next_bos++)
        if (buf[starts[next_bos] - s] != bos)
          fail("shard ", path, ": document ", next_bos, " starts at token ", starts[next_bos],
               " with ", buf[starts[next_bos] - s], ", not bos_token ", bos, " (add_bos)");
      for (; c.meta.add_eos && next_eos < starts.size() && starts[next_eos] <= s + n; next_eos++) {
        const uint64_t before = starts[next_eos];  // the token at before - 1 must be EOS
        if (before == 0 || before - 1 < s) continue;
        if (buf[before - 1 - s] != eos)
          fail("shard ", path, ": token ", before - 1, " before document ", next_eos, " is ",
               buf[before - 1 - s], ", not the EOS eot_token ", eos, " (add_eos)");
      }
      c.chunks++;
    }
    if (auto m = f.int_attr(sf::kAttrMaxToken); m && c.tokens > 0 && (uint64_t)*m != mx)
      fail("shard ", path, " says max_token = ", *m, " but its largest token is ", mx);
    if (f.string_array_attr(sf::kAttrSourceFiles).size() !=
        f.string_array_attr(sf::kAttrSourceSha256).size())
      fail("shard ", path, ": source_files and source_sha256 differ in length");
    if (f.string_array_attr(sf::kAttrTokenizerFiles).size() !=
        f.string_array_attr(sf::kAttrTokenizerSha256).size())
      fail("shard ", path, ": tokenizer_files and tokenizer_sha256 differ in length");
    c.ok = true;
  } catch (const Error& e) {
    c.problem = e.what();
  }
  return c;
}

std::vector<ShardCheck> verify_shards(const std::vector<std::string>& paths,
                                      const std::function<void(const ShardCheck&)>& on_result) {
  std::vector<ShardCheck> out;
  out.reserve(paths.size());  // keeps `first` valid
  const ShardCheck* first = nullptr;
  for (const std::string& p : paths) {
    out.push_back(verify_shard(p));
    ShardCheck& c = out.back();
    if (c.ok) {
      if (!first) {
        first = &c;
      } else {
        const ShardMeta& a = first->meta;
        const ShardMeta& b = c.meta;
        // One tokenizer by its digest, not the path it was read from (tokenizer_identity.h).
        const std::string what = tokenizer_difference(a, b);
        if (!what.empty()) {
          c.ok = false;
          c.problem = "shard " + c.path + " disagrees with " + first->path + " on the " + what +
                      ": shards of one dataset must come from one tokenizer";
        }
      }
    }
    if (on_result) on_result(c);
  }
  return out;
}

}  // namespace ratchet
