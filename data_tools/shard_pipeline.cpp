#include "data_tools/shard_pipeline.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <thread>
#include <numeric>

#include "core/error.h"
#include "core/json.h"
#include "core/rng.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/file_checks.h"
#include "tokenizer/json/unknown_counts.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "core/sha256.h"
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

std::vector<fs::path> prepare_output_dir(const std::string& dir, bool overwrite) {
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
    // A killed run's spool of a pipe (".input-N.spool-PID", spool_path), as
    // large as the pipe carried: removed once its process is gone.
    const size_t sp = name.rfind(".spool-");
    if (name.rfind(".input-", 0) == 0 && sp != std::string::npos) {
      const long pid = std::atol(name.c_str() + sp + 7);
      if (pid > 0 && ::kill((pid_t)pid, 0) != 0 && errno == ESRCH) stale_tmp.push_back(e.path());
    }
    // Old shards an --overwrite run set aside (run_shard_pipeline): never
    // guessed about, whether that run is alive or was killed outright.
    if (name.rfind(".overwritten-", 0) == 0)
      fail("--output-dir '", dir, "' holds ", e.path().string(), ": the shards a `ratchet shard "
           "--overwrite` (pid ", name.substr(13), ") set aside until its new ones were complete; ",
           "that run is still going or was killed. If it is gone, move those shards back (or "
           "remove the directory to keep the new ones) and run again");
  }
  if (ec) fail("cannot list --output-dir '", dir, "': ", ec.message());
  if (!old.empty() && !overwrite)
    fail("--output-dir '", dir, "' already holds shards (", old.front().string(),
         "): choose an empty directory or pass --overwrite to replace them");
  for (const auto& p : stale_tmp) fs::remove(p, ec);
  return old;
}

// ---- pass 1: scan ----------------------------------------------------------------

namespace {

std::string where_of(const std::string& input, uint64_t line) {
  const std::string n = input == "-" ? "<stdin>" : input;
  return line ? n + ":" + std::to_string(line) : n;
}

// Per document of the first pass: blank or not, valid UTF-8, dedup sketch,
// and (until the first kept document is found) its newlines.
class ScanSink final : public DocumentEvents {
 public:
  ScanSink(const ShardOptions& o, ScanResult& r, OnlineDedup* dedup, const DedupOptions& dopt,
           std::ofstream* report)
      : o_(o), r_(r), dedup_(dedup), dopt_(dopt), report_(report) {}
  int source = 0;
  uint64_t docs = 0, empty_skipped = 0, invalid_utf8 = 0, dedup_in = 0, exact = 0, near = 0;
  std::string first_empty, first_invalid;

  void begin(uint64_t line) override {
    line_ = line;
    blank_ = true;
    len_ = 0;
    utf8_ = Utf8Check();
    last_nl_ = prev_nl_ = -1;
    if (dedup_) sketch_ = std::make_unique<DedupSketch>(dopt_);
  }
  void text(std::string_view s) override {
    if (blank_)
      for (char c : s)
        if (!std::strchr(" \t\r\n\v\f", c)) {
          blank_ = false;
          break;
        }
    utf8_.add(s);
    if (sketch_) sketch_->add(s);
    if (r_.first_kept == SIZE_MAX)
      for (const char* p = s.data(); (p = (const char*)std::memchr(p, '\n', s.data() + s.size() - p));
           p++) {
        prev_nl_ = last_nl_;
        last_nl_ = (int64_t)(len_ + (uint64_t)(p - s.data()));
      }
    len_ += s.size();
  }
  void end() override {
    const size_t idx = r_.flags.size();
    where_.emplace_back(source, line_);
    const std::string& input = r_.inputs[(size_t)source];
    if (blank_) {
      if (o_.empty_docs == "error")
        fail("document at ", where_of(input, line_), " is empty: remove it, or drop "
             "--empty-docs error to skip empty documents");
      if (empty_skipped++ == 0) first_empty = where_of(input, line_);
      r_.flags.push_back(kDocBlank);
      return;
    }
    docs++;
    if (!utf8_.valid() && invalid_utf8++ == 0) first_invalid = where_of(input, line_);
    bool removed = false;
    if (dedup_) {
      dedup_in++;
      sketch_->finish();
      DedupRemoval m;
      removed = dedup_->add(idx, *sketch_, &m);
      if (removed) {
        (m.near ? near : exact)++;
        OrderedJson j;
        j["removed"] = where_of(input, line_);
        j["reason"] = m.near ? "near" : "exact";
        const auto& k = where_[m.kept];
        j["kept"] = where_of(r_.inputs[(size_t)k.first], k.second);
        if (m.near) j["jaccard"] = m.similarity;
        *report_ << json_line(j) << "\n";
      }
      sketch_.reset();
    }
    r_.flags.push_back(removed ? kDocRemoved : 0);
    if (removed) return;
    r_.kept++;
    r_.kept_bytes += len_;
    if (r_.first_kept == SIZE_MAX) {
      r_.first_kept = idx;
      r_.first_bytes = len_;
      r_.first_last_nl = last_nl_ >= 0 && (uint64_t)last_nl_ + 1 == len_ ? prev_nl_ : last_nl_;
      r_.first_where = where_of(input, line_);
    }
  }

 private:
  const ShardOptions& o_;
  ScanResult& r_;
  OnlineDedup* dedup_;
  const DedupOptions& dopt_;
  std::ofstream* report_;
  uint64_t line_ = 0, len_ = 0;
  bool blank_ = true;
  Utf8Check utf8_;
  int64_t last_nl_ = -1, prev_nl_ = -1;
  std::unique_ptr<DedupSketch> sketch_;
  std::vector<std::pair<int, uint64_t>> where_;  // per document: (source, line)
};

std::regex separator_regex(const ShardOptions& o) {
  try {
    return std::regex(o.separator, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail("--separator '", o.separator, "' is not a valid regular expression: ", e.what());
  }
}

TextSourceOptions source_options(const ShardOptions& o) {
  TextSourceOptions so;
  so.jsonl_field = o.jsonl_field;
  so.separator = o.separator;
  so.blank_lines = o.blank_lines;
  so.empty_is_error = o.empty_docs == "error";
  return so;
}

std::string spool_path(const ShardOptions& o, size_t i) {
  return (fs::path(o.output_dir) / (".input-" + std::to_string(i) + ".spool-" +
                                    std::to_string(::getpid()))).string();
}

}  // namespace

ScanResult scan_inputs(const ShardOptions& o, const std::vector<std::string>& inputs,
                       ShardProvenance& prov) {
  ScanResult r;
  r.inputs = inputs;
  const TextSourceOptions so = source_options(o);
  std::regex sep;
  if (!o.separator.empty()) sep = separator_regex(o);
  DedupOptions d;
  d.exact = true;
  d.near = o.dedup == "near";
  d.threshold = o.near_threshold;
  d.threads = o.threads;
  std::unique_ptr<OnlineDedup> dedup;
  std::ofstream rep;
  const std::string report = o.dedup_report.empty()
                                 ? (fs::path(o.output_dir) / "dedup_report.jsonl").string()
                                 : o.dedup_report;
  if (o.dedup != "none") {
    dedup = std::make_unique<OnlineDedup>(d);
    rep.open(report, std::ios::trunc);
    if (!rep) fail("cannot write --dedup-report '", report, "': ", std::strerror(errno));
  }
  ScanSink sink(o, r, dedup.get(), d, &rep);
  for (size_t i = 0; i < inputs.size(); i++) {
    sink.source = (int)i;
    std::FILE* spool = nullptr;
    std::string read_path = inputs[i];
    if (needs_spool(inputs[i])) {
      read_path = spool_path(o, i);
      spool = std::fopen(read_path.c_str(), "wb");
      if (!spool)
        fail("cannot spool --input '", inputs[i], "' to ", read_path, ": ", std::strerror(errno),
             " (stdin and pipes are copied to --output-dir to be read twice)");
    }
    r.read_paths.push_back(read_path);
    const uint64_t before = sink.docs;
    const uint64_t empties = sink.empty_skipped;
    InputRead got = stream_input(inputs[i], so, o.separator.empty() ? nullptr : &sep, sink, spool);
    if (spool && std::fclose(spool) != 0)
      fail("cannot spool --input '", inputs[i], "' to ", read_path, ": ", std::strerror(errno));
    r.reads.push_back(got);
    if (sink.docs == before && !o.jsonl_field.empty() && empties == 0 && sink.empty_skipped == 0)
      fail("--input ", where_of(inputs[i], 0), " holds no JSONL records");
  }
  if (sink.docs == 0)
    fail("the inputs hold no non-empty document (", inputs.size(), " file",
         inputs.size() == 1 ? "" : "s", ", ", sink.empty_skipped,
         " empty documents skipped): nothing to tokenize");
  if (sink.empty_skipped)
    std::printf("shard: skipped %llu empty document(s), the first at %s\n",
                (unsigned long long)sink.empty_skipped, sink.first_empty.c_str());
  // Reported once tokenized: "losslessly" only when no byte became unk (issue 36).
  r.invalid_utf8 = sink.invalid_utf8;
  r.first_invalid = sink.first_invalid;
  for (size_t i = 0; i < inputs.size(); i++) {
    prov.source_files.push_back(inputs[i] == "-" ? "<stdin>" : inputs[i]);
    prov.source_sha256.push_back(r.reads[i].sha256);
  }
  if (dedup) {
    rep.close();
    if (!rep) fail("cannot write --dedup-report '", report, "': ", std::strerror(errno));
    prov.dedup = d.near ? "exact+near" : "exact";
    prov.dedup_documents_in = sink.dedup_in;
    prov.dedup_exact_removed = sink.exact;
    prov.dedup_near_removed = sink.near;
    prov.dedup_near_threshold = d.near ? d.threshold : 0;
    std::printf("dedup: %llu documents in, %llu exact and %llu near duplicates removed%s; "
                "report %s\n",
                (unsigned long long)sink.dedup_in, (unsigned long long)sink.exact,
                (unsigned long long)sink.near,
                d.near ? (" (Jaccard >= " + std::to_string(d.threshold).substr(0, 4) + ", LSH " +
                          std::to_string(dedup->bands) + "x" + std::to_string(dedup->rows) + ")")
                             .c_str()
                       : "",
                report.c_str());
  }
  return r;
}

void tokenizer_provenance(const Tokenizer& tok, ShardProvenance& prov) {
  prov.tool_version = std::string("ratchet ") + RATCHET_VERSION;
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
      // Absent: nothing to record. A loop, a dangling link, a directory: named
      // (issue 36: a looping special_tokens_map.json was skipped silently).
      if (!hf::name_exists((dir / f).string())) continue;
      if (const std::string problem =
              hf::file_problem((dir / f).string(), true, hf::kMaxTokenizerConfigBytes);
          !problem.empty())
        fail((dir / f).string(), " (beside the tokenizer.json) ", problem, ", or remove it");
      prov.tokenizer_files.push_back((dir / f).string());
      prov.tokenizer_sha256.push_back(sha256_file((dir / f).string()));
    }
  }
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

uint64_t single_document_cut(uint64_t n, int64_t last_nl, double fraction, const std::string& name,
                             bool* from_nl) {
  if (n < 2)
    fail("--input '", name, "' has ", n, " byte: too short to split off --val-fraction ",
         fraction, "; pass --val-fraction 0 or more text");
  const uint64_t cut =
      std::clamp<uint64_t>((uint64_t)std::floor((1.0 - fraction) * (double)n), 1, n - 1);
  *from_nl = false;
  // The first line start at or after cut (a '\n' at cut-1 or later, not the
  // last byte): it exists exactly when the last such '\n' is at cut-1 or later.
  if (last_nl >= 0 && (uint64_t)last_nl >= cut - 1) {
    *from_nl = true;
    return cut - 1;
  }
  if (last_nl >= 0) return (uint64_t)last_nl + 1;  // else the last line start before it
  return cut;                                      // no line breaks: cut mid-line
}

size_t single_document_cut(const std::string& text, double fraction, const std::string& name) {
  const size_t last = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string::npos;
  bool from_nl;
  uint64_t c = single_document_cut(text.size(), last == std::string::npos ? -1 : (int64_t)last,
                                   fraction, name, &from_nl);
  return from_nl ? text.find('\n', c) + 1 : c;
}

void choose_split(const ShardOptions& o, ScanResult& scan) {
  if (scan.kept == 1 && o.val_fraction > 0) {
    bool from_nl;
    uint64_t c = single_document_cut(scan.first_bytes, scan.first_last_nl, o.val_fraction,
                                     scan.first_where, &from_nl);
    scan.single_split = true;
    scan.split_at = from_nl ? UINT64_MAX : c;
    scan.split_from = c;
    return;
  }
  const std::vector<bool> to_val = choose_val(scan.kept, o.val_fraction, o.seed);
  size_t k = 0;
  for (uint8_t& f : scan.flags)
    if (!(f & (kDocBlank | kDocRemoved)) && to_val[k++]) f |= kDocVal;
}

// ---- pass 2: read, tokenize, write ----------------------------------------------

namespace {

// A document, a train/val part of a single one, or a part of either
// (first: the document starts here; last: it ends here).
struct TextPart {
  std::string text;
  int source;
  bool val, first, last;
};
struct PartBlock {
  std::vector<TextPart> parts;
  size_t bytes = 0;
  uint64_t seq = 0;  // order of reading (and of writing)
};

// Blocks from the reader thread to the tokenizing threads, numbered in
// order. At most `cap` are between the reader and their writing (read,
// queued, being tokenized or waiting to be written): memory is bounded
// whatever the speed of each stage.
class BlockQueue {
 public:
  explicit BlockQueue(size_t cap) : cap_(cap) {}
  // False when the consumer gave up (cancel): the reader stops.
  bool push(std::unique_ptr<PartBlock> b) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return pushed_ - written_ < cap_ || cancelled_; });
    if (cancelled_) return false;
    pushed_++;
    q_.push_back(std::move(b));
    cv_.notify_all();
    return true;
  }
  void close(std::exception_ptr e = nullptr) {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    error_ = e;
    cv_.notify_all();
  }
  void cancel() {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  // The next block; null at the end or after cancel; rethrows the reader's error.
  std::unique_ptr<PartBlock> pop() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !q_.empty() || closed_ || cancelled_; });
    if (!q_.empty() && !cancelled_) {
      auto b = std::move(q_.front());
      q_.pop_front();
      return b;
    }
    if (error_) std::rethrow_exception(error_);
    return nullptr;
  }
  void written() {  // a block left the pipeline
    std::lock_guard<std::mutex> l(mu_);
    written_++;
    cv_.notify_all();
  }

 private:
  size_t cap_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<PartBlock>> q_;
  uint64_t pushed_ = 0, written_ = 0;
  bool closed_ = false, cancelled_ = false;
  std::exception_ptr error_;
};



// The second pass's documents cut into parts and gathered into blocks.
class EmitSink final : public DocumentEvents {
 public:
  EmitSink(const ShardOptions& o, const ScanResult& scan, const DocumentCutter& cutter,
           std::function<bool(std::unique_ptr<PartBlock>)> push, size_t block_bytes)
      : o_(o), scan_(scan), cutter_(cutter), q_(std::move(push)), block_bytes_(block_bytes) {
    block_ = std::make_unique<PartBlock>();
  }
  int source = 0;
  void begin(uint64_t) override {
    const uint8_t f = scan_.flags.at(doc_);
    skip_ = f & (kDocBlank | kDocRemoved);
    if (skip_) return;
    single_ = scan_.single_split && doc_ == scan_.first_kept;
    off_ = 0;
    split_at_ = single_ ? scan_.split_at : 0;
    start_segment(single_ ? false : (f & kDocVal) != 0);
  }
  void text(std::string_view s) override {
    if (skip_) return;
    if (single_ && !split_done_) {
      if (split_at_ == UINT64_MAX) {  // the first '\n' at or after split_from
        const uint64_t from = std::max<uint64_t>(scan_.split_from, off_);
        if (from < off_ + s.size()) {
          const size_t nl = s.find('\n', (size_t)(from - off_));
          if (nl != std::string_view::npos) split_at_ = off_ + nl + 1;
        }
      }
      if (split_at_ != UINT64_MAX && split_at_ <= off_ + s.size()) {
        const size_t k = (size_t)(split_at_ - off_);
        feed(s.substr(0, k));
        end_segment();
        split_done_ = true;
        start_segment(true);
        off_ += k;
        s = s.substr(k);
      }
    }
    feed(s);
    off_ += s.size();
  }
  void end() override {
    if (!skip_) end_segment();
    doc_++;
  }
  void flush() {
    if (!block_->parts.empty()) push();
  }

 private:
  void start_segment(bool val) {
    val_ = val;
    first_ = true;
    buf_.clear();
    scanned_ = 0;
  }
  void feed(std::string_view s) {
    if (s.empty()) return;
    buf_.append(s.data(), s.size());
    // Cut a part off once well past part_bytes (and past what decides a cut).
    const size_t part = o_.part_bytes, look = cutter_.lookahead();
    while (part > 0 && cutter_.can_cut() && buf_.size() >= 2 * part + look) {
      TextCut c;
      if (!cutter_.find(buf_, std::max(part, scanned_), false, &c)) {
        scanned_ = buf_.size() - look;  // no cut up to here: do not look again
        return;
      }
      emit(buf_.substr(0, c.end), false);
      buf_.erase(0, c.resume);
      scanned_ = 0;
    }
  }
  void end_segment() {
    const size_t part = o_.part_bytes;
    while (part > 0 && cutter_.can_cut() && buf_.size() > 2 * part) {
      TextCut c;
      if (!cutter_.find(buf_, std::max(part, scanned_), true, &c)) break;
      emit(buf_.substr(0, c.end), false);
      buf_.erase(0, c.resume);
      scanned_ = 0;
    }
    emit(std::move(buf_), true);
    buf_ = std::string();
  }
  void emit(std::string text, bool last) {
    block_->bytes += text.size();
    block_->parts.push_back({std::move(text), source, val_, first_, last});
    first_ = false;
    if (block_->bytes >= block_bytes_) push();
  }
  void push() {
    block_->seq = seq_++;
    q_(std::move(block_));  // (the reader's push throws to stop the reading)
    block_ = std::make_unique<PartBlock>();
  }

  const ShardOptions& o_;
  const ScanResult& scan_;
  const DocumentCutter& cutter_;
  std::function<bool(std::unique_ptr<PartBlock>)> q_;
  size_t block_bytes_;
  uint64_t seq_ = 0;
  std::unique_ptr<PartBlock> block_;
  size_t doc_ = 0;
  bool skip_ = false, single_ = false, split_done_ = false, val_ = false, first_ = true;
  uint64_t off_ = 0, split_at_ = 0;
  std::string buf_;
  size_t scanned_ = 0;  // buf_ has no cut before this
};

struct Tokenized {
  std::unique_ptr<PartBlock> block;
  std::vector<std::vector<uint32_t>> ids;
  std::vector<hf::UnknownCounts> unknown;  // per part: what its encode counted on its thread
};

}  // namespace

ShardTotals write_shards(const ShardOptions& o, const ScanResult& scan, const Tokenizer& tok,
                         const ShardProvenance& prov) {
  const ShardMeta meta = shard_meta(o, tok);
  std::unique_ptr<Tokenizer> special;
  if (o.parse_special) special = std::make_unique<ParseSpecial>(dynamic_cast<const HfTokenizer&>(tok));
  const Tokenizer& enc = special ? *special : tok;  // what the tokenize stage calls
  const DocumentCutter cutter(tok);
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
  // --threads 1 keeps to one core: each block is read, tokenized, then
  // compressed and stored, on this thread. With
  // N >= 2, N worker threads each tokenize whole blocks, one after another
  // with no barrier between them, while this thread writes the finished
  // blocks in order and the writers compress on their own threads.
  const bool one_core = o.threads <= 1;
  const int workers = one_core ? 0 : o.threads;
  train.set_background(!one_core);
  val.set_background(!one_core);
  ShardTotals t;
  t.text_bytes = scan.kept_bytes;
  ProgressBar bar("tokenize", t.text_bytes, o.show_progress);
  // Blocks of about one part: small enough that every thread always has one
  // to take, large enough that handing them over costs nothing.
  const size_t kBlockBytes = std::max<size_t>(o.part_bytes, size_t(64) << 10);
  BlockQueue q(std::max(4, 3 * workers));
  const TextSourceOptions so = source_options(o);
  std::regex sep;
  if (!o.separator.empty()) sep = separator_regex(o);
  auto tokenize = [&](std::unique_ptr<PartBlock> b) {
    Tokenized r;
    r.ids.reserve(b->parts.size());
    r.unknown.resize(b->parts.size());
    size_t k = 0;
    for (const TextPart& p : b->parts) {
      const hf::UnknownCounts before = hf::thread_unknown_counts();
      try {
        r.ids.push_back(enc.encode(p.text));
      } catch (const Error& e) {  // the input too, not only the tokenizer's complaint
        fail("--input ", scan.inputs.at((size_t)p.source), ": a document could not be tokenized: ",
             e.what());
      }
      const hf::UnknownCounts& after = hf::thread_unknown_counts();
      r.unknown[k].unk_bytes = after.unk_bytes - before.unk_bytes;
      r.unknown[k++].dropped_chars = after.dropped_chars - before.dropped_chars;
    }
    r.block = std::move(b);
    return r;
  };
  // A failure (an input changed since the first pass, a full disk) leaves no
  // shard behind: those already renamed into place are removed too.
  struct RemoveOnError {
    ShardStreamWriter &train, &val;
    bool done = false;
    ~RemoveOnError() {
      if (done) return;
      train.remove_written();
      val.remove_written();
    }
  } remove_on_error{train, val};
  auto write = [&](Tokenized& cur) {
    uint64_t ntok = 0;
    const std::vector<TextPart>& parts = cur.block->parts;
    for (size_t i = 0; i < parts.size(); i++) {
      const TextPart& p = parts[i];
      (p.val ? val : train).add_document_part(cur.ids[i], p.source, p.first, p.last);
      (p.val ? val : train).add_unknown(cur.unknown[i].unk_bytes, cur.unknown[i].dropped_chars);
      t.unk_bytes += cur.unknown[i].unk_bytes;
      t.dropped_chars += cur.unknown[i].dropped_chars;
      if (p.first) (p.val ? t.val_docs : t.train_docs)++;
      ntok += cur.ids[i].size() + (p.first && meta.add_bos) + (p.last && meta.add_eos);
    }
    bar.add(parts.size(), ntok, cur.block->bytes);
  };
  // The second reading, handing each block to `push`.
  auto read_all = [&](std::function<bool(std::unique_ptr<PartBlock>)> push) {
    EmitSink sink(o, scan, cutter, std::move(push), kBlockBytes);
    for (size_t i = 0; i < scan.read_paths.size(); i++) {
      sink.source = (int)i;
      stream_input(scan.read_paths[i], so, o.separator.empty() ? nullptr : &sep, sink, nullptr,
                   &scan.reads[i]);
    }
    sink.flush();
  };
  if (one_core) {  // read, tokenize and write each block in turn, on this thread
    read_all([&](std::unique_ptr<PartBlock> b) {
      Tokenized cur = tokenize(std::move(b));
      write(cur);
      return true;
    });
  } else {
    std::thread reader([&] {
      bool stopped = false;
      try {
        read_all([&](std::unique_ptr<PartBlock> b) {
          if (q.push(std::move(b))) return true;
          stopped = true;
          throw std::runtime_error("stopped");  // the consumer gave up
        });
        q.close();
      } catch (...) {
        q.close(stopped ? nullptr : std::current_exception());
      }
    });
    // Finished blocks by number, for this thread to write in order.
    struct Done {
      std::mutex mu;
      std::condition_variable cv;
      std::map<uint64_t, Tokenized> blocks;
      int running = 0;  // workers not yet out of blocks
      std::exception_ptr error;
    } done;
    done.running = workers;
    std::vector<std::thread> pool;
    struct Join {  // however this ends: stop the reader and the workers, wait for them
      BlockQueue& q;
      std::thread& reader;
      std::vector<std::thread>& pool;
      ~Join() {
        q.cancel();
        reader.join();
        for (std::thread& w : pool) w.join();
      }
    } join{q, reader, pool};
    for (int w = 0; w < workers; w++)
      pool.emplace_back([&] {
        std::exception_ptr err;
        try {
          while (auto b = q.pop()) {
            const uint64_t seq = b->seq;
            Tokenized r = tokenize(std::move(b));
            std::lock_guard<std::mutex> l(done.mu);
            done.blocks.emplace(seq, std::move(r));
            done.cv.notify_all();
          }
        } catch (...) {
          err = std::current_exception();
        }
        std::lock_guard<std::mutex> l(done.mu);
        if (err && !done.error) done.error = err;
        done.running--;
        done.cv.notify_all();
      });
    for (uint64_t seq = 0;; seq++) {
      std::optional<Tokenized> cur;
      {
        std::unique_lock<std::mutex> l(done.mu);
        done.cv.wait(l, [&] { return done.error || done.blocks.count(seq) || done.running == 0; });
        if (done.error) std::rethrow_exception(done.error);
        auto it = done.blocks.find(seq);
        if (it == done.blocks.end()) break;  // the end (a reader's error reached the workers)
        cur = std::move(it->second);
        done.blocks.erase(it);
      }
      write(*cur);
      cur.reset();
      q.written();
    }
  }
  train.finish();
  val.finish();
  remove_on_error.done = true;
  bar.finish();
  t.seconds = std::max(bar.elapsed(), 1e-9);
  t.train_tokens = train.total_tokens();
  t.val_tokens = val.total_tokens();
  t.train_shards = train.shards().size();
  t.val_shards = val.shards().size();
  return t;
}

// ---- the pipeline ---------------------------------------------------------------

namespace {
// "'<unk>' (id 0)": the unk token of a tokenizer.json, for the warning.
std::string unk_name(const Tokenizer& tok) {
  const auto* h = dynamic_cast<const HfTokenizer*>(&tok);
  if (!h || h->engine().model.unk < 0) return "";
  const uint32_t id = (uint32_t)h->engine().model.unk;
  return "'" + h->pieces({id}).at(0) + "' (id " + std::to_string(id) + ")";
}
}  // namespace

void run_shard_pipeline(const ShardOptions& o, const Tokenizer& tok) {
  // Blocks of a few MB are allocated and freed by several threads all run
  // long: glibc's default raises its mmap threshold after each free of a
  // large block, and the blocks then fragment the heaps, so max RSS crept up
  // with the input (120 -> 184 MB for 20 -> 200 MB of text, byte). A fixed
  // threshold of 1 MB gives every block back when freed (106 -> 126 MB).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  std::vector<std::string> inputs = expand_text_inputs(o.inputs, "--input");
  // A directory this run creates is removed again if it fails (issue 36: an
  // empty --output-dir was left behind); shards are removed by write_shards.
  std::error_code ec;
  const bool created = !fs::exists(fs::symlink_status(o.output_dir, ec));
  struct RemoveCreated {
    const std::string& dir;
    bool armed;
    ~RemoveCreated() {
      std::error_code e;
      if (armed) fs::remove_all(dir, e);
    }
  } remove_created{o.output_dir, created};
  // --overwrite: the old shards are set aside (renamed into a hidden
  // directory beside them), not deleted, until the new ones are all in place;
  // a run that fails or is stopped puts them back. Before, they were deleted
  // first, and a failed or interrupted run left neither.
  struct SetAside {
    fs::path hold;
    std::vector<fs::path> moved;
    bool done = false;
    ~SetAside() {
      std::error_code e;
      if (hold.empty()) return;
      if (!done)
        for (const fs::path& p : moved) fs::rename(hold / p.filename(), p, e);
      if (done || !e) fs::remove_all(hold, e);
    }
  } aside;
  const std::vector<fs::path> old = prepare_output_dir(o.output_dir, o.overwrite);
  if (!old.empty()) {
    aside.hold = fs::path(o.output_dir) / (".overwritten-" + std::to_string(::getpid()));
    if (!fs::create_directory(aside.hold, ec))
      fail("cannot create ", aside.hold.string(), " to set the old shards aside: ", ec.message());
    for (const fs::path& p : old) {
      fs::rename(p, aside.hold / p.filename(), ec);
      if (ec) fail("cannot set aside old shard ", p.string(), ": ", ec.message());
      aside.moved.push_back(p);
    }
  }
  const ShardMeta meta = shard_meta(o, tok);  // bad framing flags fail before any reading
  ShardProvenance prov;
  tokenizer_provenance(tok, prov);
  prov.parse_special = o.parse_special;
  ScanResult scan;
  struct Spools {  // stdin/pipe copies, removed however the run ends
    const ShardOptions& o;
    size_t n;
    ~Spools() {
      std::error_code ec;
      for (size_t i = 0; i < n; i++) fs::remove(spool_path(o, i), ec);
    }
  } spools{o, inputs.size()};
  scan = scan_inputs(o, inputs, prov);
  choose_split(o, scan);
  const ShardTotals t = write_shards(o, scan, tok, prov);
  aside.done = true;  // the new shards are complete: the old ones go
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
  if (scan.invalid_utf8)
    std::printf("shard: warning: %llu document(s) are not valid UTF-8 (the first at %s); "
                "tokenized byte by byte%s\n",
                (unsigned long long)scan.invalid_utf8, scan.first_invalid.c_str(),
                t.unk_bytes || t.dropped_chars ? "" : ", losslessly");
  // Not silent (issue 36): input the tokenizer has no token for.
  if (t.unk_bytes)
    std::printf("shard: warning: %llu byte(s) of the input became the unk token %s: the tokenizer "
                "has no token (and no byte fallback) for them\n",
                (unsigned long long)t.unk_bytes, unk_name(tok).c_str());
  if (t.dropped_chars)
    std::printf("shard: warning: %llu character(s) of the input were dropped: the tokenizer has no "
                "token for them and no unk token (Hugging Face's library drops them too)\n",
                (unsigned long long)t.dropped_chars);
  std::printf("shard: %s of text in %.2f s on %d thread(s): %.1f MB/s, %s tokens/s\n",
              human_bytes((double)t.text_bytes).c_str(), t.seconds, o.threads,
              t.text_bytes / t.seconds / 1e6,
              human_count((t.train_tokens + t.val_tokens) / t.seconds).c_str());
  remove_created.armed = false;
}

}  // namespace ratchet
