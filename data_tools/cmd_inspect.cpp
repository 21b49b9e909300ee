// `ratchet inspect SHARDS...`: what a set of token shards holds (tokens,
// documents, vocabulary, tokenizer, compression, provenance, a histogram of
// document lengths), and with --decode START:COUNT the text of a token range.
#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "data/tokenizer_identity.h"
#include "cli/options_util.h"
#include "data_tools/commands.h"
#include "core/error.h"
#include "data_tools/progress.h"
#include "data/shard_reader.h"
#include "data/shard_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ratchet {
namespace po = boost::program_options;
namespace sf = shard_format;

int cmd_inspect(int argc, char** argv) {
  std::vector<std::string> shards;
  std::string decode, vocab, merges, tokenizer;
  po::options_description desc("ratchet inspect: summarize token shards\n\noptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("shard", po::value(&shards)->multitoken(), "shard files or globs (also positional)")
    ("decode", po::value(&decode), "START:COUNT: print the text of tokens [START, START+COUNT) "
                                   "of the shards read as one stream")
    ("vocab", po::value(&vocab), "gpt2: encoder.json for --decode (default: installed copy)")
    ("merges", po::value(&merges), "gpt2: vocab.bpe for --decode")
    ("tokenizer", po::value(&tokenizer), "Hugging Face shards: the tokenizer.json (or its "
       "directory) for --decode, if not at the path they record; its SHA-256 must match");
  // clang-format on
  po::positional_options_description pos;
  pos.add("shard", -1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "inspect", &pos, true))
    return kExitUsage;
  if (vm.count("help")) {
    std::cout << desc << R"(
Examples:
  ratchet inspect data/train_*.h5
  ratchet inspect data/val_000000.h5 --decode 0:200
  ratchet inspect data/val_000000.h5 --decode 0:200 --tokenizer models/llama3/
)";
    return kExitOk;
  }
  if (shards.empty()) fail("no shard given: ratchet inspect SHARDS... (see --help)");
  if (decode.empty() && (!vocab.empty() || !merges.empty() || !tokenizer.empty()))
    fail("--vocab, --merges and --tokenizer are for --decode START:COUNT (without it nothing is "
         "decoded): add --decode, or drop them");
  std::vector<std::string> paths = expand_shard_paths(shards, "shard");

  std::vector<std::unique_ptr<ShardFile>> files;
  uint64_t total = 0, docs = 0, raw = 0, stored = 0;
  std::vector<uint64_t> starts;           // global document starts
  std::vector<uint64_t> shard_start;      // global position of each shard
  int64_t unk_total = 0, dropped_total = 0;  // input without a token (attributes)
  for (const std::string& p : paths) {
    auto f = std::make_unique<ShardFile>(p);
    const ShardMeta& m = f->meta();
    if (!files.empty()) {
      const ShardMeta& a = files.front()->meta();
      if (const std::string d = tokenizer_difference(a, m); !d.empty())
        fail("shard ", p, " and ", files.front()->path(), " disagree on the ", d,
             ": inspect shards of one dataset together");
    }
    std::vector<uint64_t> off = f->read_doc_offsets();
    for (uint64_t o : off) starts.push_back(total + o);
    std::string filters;
    for (const auto& x : f->filters()) filters += (filters.empty() ? "" : "+") + x;
    const uint64_t r = f->num_tokens() * (uint64_t)f->token_bytes(), s = f->stored_bytes();
    std::printf("%s: %llu tokens, %zu documents, uint%d, chunks of %llu, %s, %s on disk "
                "(compression %.2fx)\n",
                p.c_str(), (unsigned long long)f->num_tokens(), off.size(), 8 * f->token_bytes(),
                (unsigned long long)f->chunk_tokens(), filters.empty() ? "no filters" : filters.c_str(),
                human_bytes((double)s).c_str(), s ? (double)r / (double)s : 0.0);
    auto srcs = f->string_array_attr(sf::kAttrSourceFiles);
    auto shas = f->string_array_attr(sf::kAttrSourceSha256);
    for (size_t i = 0; i < srcs.size() && i < 5; i++)
      std::printf("    source %s  sha256 %s\n", srcs[i].c_str(),
                  i < shas.size() ? shas[i].substr(0, 16).c_str() : "?");
    if (srcs.size() > 5) std::printf("    ... and %zu more sources\n", srcs.size() - 5);
    // Input without a token, as `shard` counted it (issue 36).
    const int64_t unk = f->int_attr(sf::kAttrUnkBytes).value_or(0);
    const int64_t dropped = f->int_attr(sf::kAttrDroppedChars).value_or(0);
    if (unk) std::printf("    warning: %lld byte(s) of its input became the unk token\n", (long long)unk);
    if (dropped)
      std::printf("    warning: %lld character(s) of its input were dropped (no token, no unk token)\n",
                  (long long)dropped);
    unk_total += unk;
    dropped_total += dropped;
    shard_start.push_back(total);
    total += f->num_tokens();
    docs += off.size();
    raw += r;
    stored += s;
    files.push_back(std::move(f));
  }
  const ShardFile& first = *files.front();
  const ShardMeta& m = first.meta();
  std::printf("\ntotal: %zu shard(s), %llu tokens, %llu documents\n", files.size(),
              (unsigned long long)total, (unsigned long long)docs);
  if (unk_total || dropped_total)
    std::printf("warning: %lld byte(s) of the input became the unk token, %lld character(s) were "
                "dropped: the tokenizer had no token for them\n",
                (long long)unk_total, (long long)dropped_total);
  std::printf("tokenizer %s, vocab_size %d, eot_token %d, format_version %lld\n",
              m.tokenizer.c_str(), m.vocab_size, m.eot_token, (long long)first.format_version());
  if (m.framed)
    std::printf("documents: %s text%s%s\n",
                m.add_bos ? ("BOS " + std::to_string(m.bos_token) + " +").c_str() : "",
                m.add_eos ? (" + EOS " + std::to_string(m.eot_token)).c_str() : " (no EOS)",
                first.int_attr(sf::kAttrParseSpecial).value_or(0) ? ", special tokens parsed" : "");
  if (!m.tokenizer_sha256.empty()) {
    std::printf("tokenizer.json sha256 %s\n", m.tokenizer_sha256.c_str());
    auto files = first.string_array_attr(sf::kAttrTokenizerFiles);
    auto shas = first.string_array_attr(sf::kAttrTokenizerSha256);
    for (size_t i = 0; i < files.size(); i++)
      std::printf("    tokenizer file %s  sha256 %s\n", files[i].c_str(),
                  i < shas.size() ? shas[i].substr(0, 16).c_str() : "?");
  }
  if (auto v = first.string_attr(sf::kAttrToolVersion)) std::printf("written by %s\n", v->c_str());
  if (auto d = first.string_attr(sf::kAttrDedup)) {
    std::printf("dedup %s: %lld documents in, %lld exact and %lld near duplicates removed",
                d->c_str(), (long long)first.int_attr(sf::kAttrDedupIn).value_or(0),
                (long long)first.int_attr(sf::kAttrDedupExact).value_or(0),
                (long long)first.int_attr(sf::kAttrDedupNear).value_or(0));
    if (auto t = first.double_attr(sf::kAttrDedupThreshold); t && *t > 0)
      std::printf(" (Jaccard >= %.2f)", *t);
    std::printf("\n");
  }
  std::printf("storage: %s raw, %s on disk, compression ratio %.2fx\n",
              human_bytes((double)raw).c_str(), human_bytes((double)stored).c_str(),
              stored ? (double)raw / (double)stored : 0.0);

  // Document lengths (tokens, eot included) over the concatenated stream.
  if (!starts.empty()) {
    std::vector<uint64_t> len;
    for (size_t i = 0; i < starts.size(); i++)
      len.push_back((i + 1 < starts.size() ? starts[i + 1] : total) - starts[i]);
    std::vector<uint64_t> sorted = len;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (uint64_t l : len) mean += (double)l;
    mean /= (double)len.size();
    std::printf("document length (tokens): min %llu, median %llu, mean %.1f, max %llu\n",
                (unsigned long long)sorted.front(), (unsigned long long)sorted[sorted.size() / 2],
                mean, (unsigned long long)sorted.back());
    std::vector<uint64_t> hist(65, 0);
    int lo = 64, hi = 0;
    for (uint64_t l : len) {
      int b = 0;
      while ((uint64_t(1) << (b + 1)) <= l && b < 63) b++;
      hist[b]++;
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
    uint64_t peak = *std::max_element(hist.begin(), hist.end());
    for (int b = lo; b <= hi; b++) {
      int bar = peak ? (int)(40.0 * (double)hist[b] / (double)peak + 0.5) : 0;
      char range[64];
      std::snprintf(range, sizeof range, "[%llu, %llu)", (unsigned long long)(uint64_t(1) << b),
                    (unsigned long long)(uint64_t(1) << (b + 1)));
      std::printf("  %-22s %10llu %s\n", range, (unsigned long long)hist[b],
                  std::string(bar, '#').c_str());
    }
  }

  if (!decode.empty()) {
    size_t colon = decode.find(':');
    uint64_t start = 0, count = 0;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      size_t used = 0;
      start = std::stoull(decode.substr(0, colon), &used);
      if (used != colon) throw std::invalid_argument("start");
      count = std::stoull(decode.substr(colon + 1), &used);
      if (used != decode.size() - colon - 1) throw std::invalid_argument("count");
    } catch (const std::exception&) {
      fail("--decode '", decode, "' is not START:COUNT (e.g. 0:200)");
    }
    if (start >= total) fail("--decode start ", start, " is past the end (", total, " tokens)");
    count = std::min(count, total - start);
    std::vector<uint32_t> ids;
    ids.reserve(count);
    for (size_t i = 0; i < files.size() && count > 0; i++) {
      uint64_t a = shard_start[i], n = files[i]->num_tokens();
      if (start >= a + n) continue;
      uint64_t off = start - a, k = std::min(count, n - off);
      std::vector<uint32_t> buf(k);
      files[i]->read_tokens(off, k, buf.data());
      ids.insert(ids.end(), buf.begin(), buf.end());
      start += k;
      count -= k;
    }
    std::printf("\n--- tokens %s ---\n", decode.c_str());
    check_tokenizer_files(m.tokenizer, {vocab, merges});
    std::unique_ptr<Tokenizer> tok;
    try {
      // A Hugging Face tokenizer is checked against the recorded digest.
      tok = hf_tokenizer_json(m.tokenizer).empty() && tokenizer.empty()
                ? make_tokenizer(m.tokenizer, "the shards' tokenizer", TokenizerFiles{vocab, merges})
                : load_shard_tokenizer(m, tokenizer, "--tokenizer");
    } catch (const Error& e) {
      // A tokenizer.json that is not the shards' one is an error, never a guess.
      if (!tokenizer.empty() || !hf_tokenizer_json(m.tokenizer).empty()) throw;
      std::fprintf(stderr, "inspect: cannot decode (%s); printing ids\n", e.what());
    }
    if (tok) {
      std::string text = tok->decode(ids);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::printf("\n");
    } else {
      for (uint32_t id : ids) std::printf("%u ", id);
      std::printf("\n");
    }
  }
  return kExitOk;
}

}  // namespace ratchet
