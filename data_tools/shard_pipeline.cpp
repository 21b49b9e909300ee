#include "data_tools/shard_pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>

#include "core/error.h"
#include "core/json.h"
#include "core/rng.h"
#include "data/gpt2_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data_tools/checksum.h"
#include "data_tools/dedup.h"
#include "data_tools/parallel_tokenize.h"
#include "data_tools/progress.h"
#include "data_tools/shard_writer.h"
#include "version.h"

namespace ratchet {

namespace fs = std::filesystem;

namespace {

// A Hugging Face tokenizer seen through Tokenizer::encode with
// parse_special on (--parse-special): the tokenize stage calls encode(text).
class ParseSpecial final : public Tokenizer {
 public:
  explicit ParseSpecial(const HfTokenizer& t) : t_(t) {}
  std::string name() const override { return t_.name(); }
  int vocab_size() const override { return t_.vocab_size(); }
  int eot_token() const override { return t_.eot_token(); }
  std::vector<uint32_t> encode(const std::string& text) const override {
    return t_.encode(text, /*parse_special=*/true);
  }
  std::string decode(const std::vector<uint32_t>& ids) const override { return t_.decode(ids); }

 private:
  const HfTokenizer& t_;
};

// "on" / "off" / "" (the default `dflt`); Error naming the flag otherwise.
bool on_off(const std::string& v, bool dflt, const char* flag) {
  if (v.empty()) return dflt;
  if (v == "on") return true;
  if (v == "off") return false;
  fail(flag, " '", v, "': pass on or off (or leave it out for the tokenizer's own choice)");
}

}  // namespace

ShardMeta shard_meta(const ShardOptions& o, const Tokenizer& tok) {
  ShardMeta m{tok.name(), tok.vocab_size(), tok.eot_token()};
  m.framed = true;
  const auto* hf = dynamic_cast<const HfTokenizer*>(&tok);
  if (o.parse_special && !hf)
    fail("--parse-special is for Hugging Face tokenizers (--tokenizer PATH/tokenizer.json); '",
         tok.name(), "' has no special tokens but its end-of-text, which it never reads from text");
  if (!hf) {
    m.add_bos = on_off(o.add_bos, false, "--add-bos");
    m.add_eos = on_off(o.add_eos, true, "--add-eos");
    if (m.add_bos)
      fail("--add-bos on: tokenizer '", tok.name(), "' has no BOS token; its documents are "
           "separated by the end-of-text token (--add-eos)");
    return m;
  }
  m.tokenizer_sha256 = hf->sha256();
  m.bos_token = hf->bos_id();
  // No EOS added by the tokenizer and no BOS either: documents would run into
  // each other, so an EOS separates them unless --add-eos off says otherwise.
  m.add_bos = on_off(o.add_bos, hf->adds_bos() && hf->bos_id() >= 0, "--add-bos");
  m.add_eos = on_off(o.add_eos, hf->adds_eos() || !hf->adds_bos(), "--add-eos");
  if (m.add_bos && m.bos_token < 0)
    fail("--add-bos on: ", hf->json_path(), " defines no BOS token (no bos_token in its "
         "tokenizer_config.json or post-processor): pass --add-bos off");
  if (hf->eos_id() < 0 || hf->eos_id() >= m.vocab_size)
    fail(hf->json_path(), " defines no EOS token (eos_token in tokenizer_config.json beside it): "
         "shards record one as eot_token; add a tokenizer_config.json with eos_token");
  return m;
}

void prepare_output_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create --output-dir '", dir, "': ", ec.message());
  if (!fs::is_directory(dir, ec)) fail("--output-dir '", dir, "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("--output-dir '", dir, "' is not writable: ", std::strerror(errno),
         "; choose another directory");
  std::vector<fs::path> old, stale_tmp;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    bool shard = (name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) &&
                 name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0;
    if (shard) old.push_back(e.path());
    // Left by a crashed run (never looks like a shard: hidden, .tmp- suffix).
    if (name[0] == '.' && name.find(".h5.tmp-") != std::string::npos) stale_tmp.push_back(e.path());
  }
  if (ec) fail("cannot list --output-dir '", dir, "': ", ec.message());
  if (!old.empty() && !overwrite)
    fail("--output-dir '", dir, "' already holds shards (", old.front().string(),
         "): choose an empty directory or pass --overwrite to replace them");
  for (const auto& p : old)
    if (!fs::remove(p, ec) && ec) fail("cannot remove old shard ", p.string(), ": ", ec.message());
  for (const auto& p : stale_tmp) fs::remove(p, ec);
}

// ---- gather sources -----------------------------------------------------------

TextCorpus gather_sources(const ShardOptions& o, const std::vector<std::string>& inputs) {
  TextSourceOptions so;
  so.jsonl_field = o.jsonl_field;
  so.separator = o.separator;
  so.blank_lines = o.blank_lines;
  so.empty_is_error = o.empty_docs == "error";
  TextCorpus corpus = read_text_corpus(inputs, so);
  if (corpus.empty_skipped)
    std::printf("shard: skipped %llu empty document(s), the first at %s\n",
                (unsigned long long)corpus.empty_skipped, corpus.first_empty.c_str());
  if (corpus.invalid_utf8)
    std::printf("shard: warning: %llu document(s) are not valid UTF-8 (the first at %s); "
                "tokenized byte by byte, losslessly\n",
                (unsigned long long)corpus.invalid_utf8, corpus.first_invalid_utf8.c_str());
  return corpus;
}

ShardProvenance shard_provenance(const TextCorpus& corpus, const Tokenizer& tok) {
  ShardProvenance prov;
  prov.tool_version = std::string("ratchet ") + RATCHET_VERSION;
  for (const auto& s : corpus.sources) {
    prov.source_files.push_back(s.name == "-" ? "<stdin>" : s.name);
    prov.source_sha256.push_back(s.sha256);
  }
  if (auto* g = dynamic_cast<const Gpt2Tokenizer*>(&tok)) {
    prov.tokenizer_files = {g->encoder_path(), g->merges_path()};
    prov.tokenizer_sha256 = {sha256_file(g->encoder_path()), sha256_file(g->merges_path())};
  }
  if (auto* h = dynamic_cast<const HfTokenizer*>(&tok)) {
    // tokenizer.json first (the digest that identifies the tokenizer), then
    // the files beside it that a model directory carries with it.
    prov.tokenizer_files = {h->json_path()};
    prov.tokenizer_sha256 = {h->sha256()};
    const fs::path dir = fs::path(h->json_path()).parent_path();
    for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"}) {
      std::error_code ec;
      if (!fs::is_regular_file(dir / f, ec)) continue;
      prov.tokenizer_files.push_back((dir / f).string());
      prov.tokenizer_sha256.push_back(sha256_file((dir / f).string()));
    }
  }
  return prov;
}

// ---- dedup ----------------------------------------------------------------------

std::vector<bool> dedup_documents(const ShardOptions& o, const TextCorpus& corpus,
                                  ShardProvenance& prov) {
  const size_t n_in = corpus.documents.size();
  if (o.dedup == "none") return std::vector<bool>(n_in, false);
  DedupOptions d;
  d.exact = true;
  d.near = o.dedup == "near";
  d.threshold = o.near_threshold;
  d.threads = o.threads;
  std::vector<std::string_view> views;
  views.reserve(n_in);
  for (const auto& doc : corpus.documents) views.emplace_back(doc.text);
  DedupResult r = deduplicate(views, d);
  prov.dedup = d.near ? "exact+near" : "exact";
  prov.dedup_documents_in = n_in;
  prov.dedup_exact_removed = r.exact_removed;
  prov.dedup_near_removed = r.near_removed;
  prov.dedup_near_threshold = d.near ? d.threshold : 0;

  // One JSON object per removal: {"removed", "reason", "kept"[, "jaccard"]}.
  const std::string report = o.dedup_report.empty()
                                 ? (fs::path(o.output_dir) / "dedup_report.jsonl").string()
                                 : o.dedup_report;
  std::ofstream rep(report, std::ios::trunc);
  if (!rep) fail("cannot write --dedup-report '", report, "': ", std::strerror(errno));
  for (const DedupRemoval& m : r.removals) {
    OrderedJson line;
    line["removed"] = corpus.where(corpus.documents[m.doc]);
    line["reason"] = m.near ? "near" : "exact";
    line["kept"] = corpus.where(corpus.documents[m.kept]);
    if (m.near) line["jaccard"] = m.similarity;
    rep << json_line(line) << "\n";
  }
  rep.close();
  if (!rep) fail("cannot write --dedup-report '", report, "': ", std::strerror(errno));
  std::printf("dedup: %zu documents in, %llu exact and %llu near duplicates removed%s; "
              "report %s\n",
              n_in, (unsigned long long)r.exact_removed, (unsigned long long)r.near_removed,
              d.near ? (" (Jaccard >= " + std::to_string(d.threshold).substr(0, 4) + ", LSH " +
                        std::to_string(r.bands) + "x" + std::to_string(r.rows) + ")")
                           .c_str()
                     : "",
              report.c_str());
  return r.removed;
}

// ---- split ----------------------------------------------------------------------

std::vector<bool> choose_val(size_t n, double fraction, uint64_t seed) {
  std::vector<bool> val(n, false);
  if (fraction <= 0 || n < 2) return val;
  size_t k = std::clamp<size_t>((size_t)std::llround(fraction * (double)n), 1, n - 1);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  Rng rng(seed);
  for (size_t i = n - 1; i > 0; i--) std::swap(order[i], order[rng.below(i + 1)]);
  for (size_t i = 0; i < k; i++) val[order[i]] = true;
  return val;
}

size_t single_document_cut(const std::string& text, double fraction, const std::string& name) {
  const size_t n = text.size();
  if (n < 2)
    fail("--input '", name, "' has ", n, " byte: too short to split off --val-fraction ",
         fraction, "; pass --val-fraction 0 or more text");
  size_t cut = std::clamp<size_t>((size_t)std::floor((1.0 - fraction) * (double)n), 1, n - 1);
  size_t nl = text.find('\n', cut - 1);  // first line start at or after cut
  if (nl != std::string::npos && nl + 1 < n) return nl + 1;
  nl = text.rfind('\n', cut - 1);  // else the last line start before it
  if (nl != std::string::npos && nl + 1 < n) return nl + 1;
  return cut;  // no line breaks: cut mid-line
}

std::vector<ShardPiece> split_documents(const ShardOptions& o, const TextCorpus& corpus,
                                        const std::vector<bool>& removed) {
  std::vector<size_t> kept;
  for (size_t i = 0; i < corpus.documents.size(); i++)
    if (!removed[i]) kept.push_back(i);
  std::vector<ShardPiece> pieces;
  if (kept.size() == 1 && o.val_fraction > 0) {
    const TextDocument& d = corpus.documents[kept[0]];
    size_t cut = single_document_cut(d.text, o.val_fraction, corpus.where(d));
    pieces.push_back({kept[0], 0, cut, false});
    pieces.push_back({kept[0], cut, d.text.size(), true});
  } else {
    std::vector<bool> to_val = choose_val(kept.size(), o.val_fraction, o.seed);
    for (size_t i = 0; i < kept.size(); i++)
      pieces.push_back({kept[i], 0, corpus.documents[kept[i]].text.size(), (bool)to_val[i]});
  }
  return pieces;
}

std::vector<ShardPiece> cut_long_pieces(const std::vector<ShardPiece>& pieces,
                                        const TextCorpus& corpus, const Tokenizer& tok,
                                        size_t part_bytes) {
  std::vector<ShardPiece> out;
  out.reserve(pieces.size());
  for (const ShardPiece& p : pieces) {
    if (part_bytes == 0 || p.end - p.begin <= 2 * part_bytes) {
      out.push_back(p);
      continue;
    }
    const std::string& text = corpus.documents[p.doc].text;
    std::vector<size_t> cuts;
    if (p.begin == 0 && p.end == text.size()) {
      cuts = safe_cuts(tok, text, part_bytes);
    } else {  // a train/val part of a single document: cut inside it
      for (size_t c : safe_cuts(tok, text.substr(p.begin, p.end - p.begin), part_bytes))
        cuts.push_back(p.begin + c);
    }
    size_t begin = p.begin;
    for (size_t c : cuts) {
      out.push_back({p.doc, begin, c, p.val, begin == p.begin, false});
      begin = c;
    }
    out.push_back({p.doc, begin, p.end, p.val, begin == p.begin, true});
  }
  return out;
}

// ---- tokenize -------------------------------------------------------------------

std::unique_ptr<TokenizedBlock> tokenize_block(const TextCorpus& corpus,
                                               const std::vector<ShardPiece>& pieces, size_t a,
                                               const Tokenizer& tok, int threads,
                                               size_t block_bytes) {
  auto blk = std::make_unique<TokenizedBlock>();
  blk->a = a;
  size_t b = a;
  while (b < pieces.size() && (b == a || blk->bytes < block_bytes))
    blk->bytes += pieces[b].end - pieces[b].begin, b++;
  blk->b = b;
  blk->cut_text.reserve(b - a);  // reserved: pointers into it stay valid
  std::vector<const std::string*> texts;
  for (size_t i = a; i < b; i++) {
    const std::string& t = corpus.documents[pieces[i].doc].text;
    if (pieces[i].begin == 0 && pieces[i].end == t.size()) {
      texts.push_back(&t);
    } else {
      blk->cut_text.push_back(t.substr(pieces[i].begin, pieces[i].end - pieces[i].begin));
      texts.push_back(&blk->cut_text.back());
    }
  }
  tokenize_parallel(tok, texts, threads, blk->ids);
  return blk;
}

// ---- write ----------------------------------------------------------------------

ShardTotals write_shards(const ShardOptions& o, const TextCorpus& corpus,
                         const std::vector<ShardPiece>& pieces, const Tokenizer& tok,
                         const ShardProvenance& prov) {
  const ShardMeta meta = shard_meta(o, tok);
  std::unique_ptr<Tokenizer> special;
  if (o.parse_special) special = std::make_unique<ParseSpecial>(dynamic_cast<const HfTokenizer&>(tok));
  const Tokenizer& enc = special ? *special : tok;  // what the tokenize stage calls
  auto report = [&](const ShardSummary& s) {
    if (o.show_progress) std::fprintf(stderr, "\r\x1b[K");
    std::printf("wrote %s: %llu tokens, %llu documents\n", s.path.c_str(),
                (unsigned long long)s.tokens, (unsigned long long)s.documents);
    std::fflush(stdout);
  };
  ShardStreamWriter train(o.output_dir, "train", meta, o.shard_tokens, report);
  ShardStreamWriter val(o.output_dir, "val", meta, o.shard_tokens, report);
  train.set_provenance(prov);
  val.set_provenance(prov);
  ShardTotals t;
  for (const ShardPiece& p : pieces) t.text_bytes += p.end - p.begin;
  ProgressBar bar("tokenize", t.text_bytes, o.show_progress);
  // Blocks of about one part (at least 1 MB): block k+1 is tokenized while
  // block k is written, and neither holds much.
  const size_t kBlockBytes = std::max<size_t>(o.part_bytes, size_t(1) << 20);
  auto next_block = [&](size_t a) {
    return std::async(std::launch::async, [&, a] {
      return tokenize_block(corpus, pieces, a, enc, o.threads, kBlockBytes);
    });
  };
  std::future<std::unique_ptr<TokenizedBlock>> pending;
  if (!pieces.empty()) pending = next_block(0);
  while (pending.valid()) {
    std::unique_ptr<TokenizedBlock> blk = pending.get();
    if (blk->b < pieces.size()) pending = next_block(blk->b);
    uint64_t ntok = 0;
    for (size_t i = blk->a; i < blk->b; i++) {
      const int src = corpus.documents[pieces[i].doc].source;
      const ShardPiece& p = pieces[i];
      (p.val ? val : train).add_document_part(blk->ids[i - blk->a], src, p.first, p.last);
      if (p.first) (p.val ? t.val_docs : t.train_docs)++;
      ntok += blk->ids[i - blk->a].size() + (p.first && meta.add_bos) + (p.last && meta.add_eos);
    }
    bar.add(blk->b - blk->a, ntok, blk->bytes);
  }
  train.finish();
  val.finish();
  bar.finish();
  t.seconds = std::max(bar.elapsed(), 1e-9);
  t.train_tokens = train.total_tokens();
  t.val_tokens = val.total_tokens();
  t.train_shards = train.shards().size();
  t.val_shards = val.shards().size();
  return t;
}

// ---- the pipeline ---------------------------------------------------------------

void run_shard_pipeline(const ShardOptions& o, const Tokenizer& tok) {
  std::vector<std::string> inputs = expand_text_inputs(o.inputs, "--input");
  prepare_output_dir(o.output_dir, o.overwrite);
  const ShardMeta meta = shard_meta(o, tok);  // bad framing flags fail before any reading
  const TextCorpus corpus = gather_sources(o, inputs);
  ShardProvenance prov = shard_provenance(corpus, tok);
  prov.parse_special = o.parse_special;
  const std::vector<bool> removed = dedup_documents(o, corpus, prov);
  const std::vector<ShardPiece> pieces = split_documents(o, corpus, removed);
  const ShardTotals t =
      write_shards(o, corpus, cut_long_pieces(pieces, corpus, tok, o.part_bytes), tok, prov);
  std::printf("shard: %zu train documents (%llu tokens, %zu shards), %zu val documents "
              "(%llu tokens, %zu shards), tokenizer %s in %s\n",
              t.train_docs, (unsigned long long)t.train_tokens, t.train_shards, t.val_docs,
              (unsigned long long)t.val_tokens, t.val_shards, tok.name().c_str(),
              o.output_dir.c_str());
  if (!meta.tokenizer_sha256.empty() || meta.add_bos || !meta.add_eos)
    std::printf("shard: documents are %s text%s (tokenizer.json sha256 %s%s)\n",
                meta.add_bos ? ("[BOS " + std::to_string(meta.bos_token) + "]").c_str() : "",
                meta.add_eos ? (" [EOS " + std::to_string(meta.eot_token) + "]").c_str() : "",
                meta.tokenizer_sha256.empty() ? "none" : meta.tokenizer_sha256.substr(0, 16).c_str(),
                o.parse_special ? ", special tokens in the text parsed" : "");
  std::printf("shard: %s of text in %.2f s on %d thread(s): %.1f MB/s, %s tokens/s\n",
              human_bytes((double)t.text_bytes).c_str(), t.seconds, o.threads,
              t.text_bytes / t.seconds / 1e6,
              human_count((t.train_tokens + t.val_tokens) / t.seconds).c_str());
}

}  // namespace ratchet
