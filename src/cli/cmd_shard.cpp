// `ratchet shard`: tokenize text files into HDF5 token shards (train/val).
//
// Each input file (or stdin, `-`) is one document; documents are written
// back to back, each followed by the end-of-text token, into
// <output-dir>/train_NNNNNN.h5 and val_NNNNNN.h5 (format: data/shard_format.h).
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
#include <iostream>
#include <iterator>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <glob.h>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/shard_writer.h"
#include "data/tokenizer.h"

namespace ratchet {
namespace {
namespace po = boost::program_options;
namespace fs = std::filesystem;

struct ShardOptions {
  std::string tokenizer = "byte";
  std::vector<std::string> inputs;
  std::string output_dir;
  double val_fraction = 0.1;
  uint64_t seed = 1337;
  uint64_t shard_tokens = 100000000;
  bool overwrite = false;
};

const char* kHelpTail = R"(
Documents and the split:
  Each input file is one document (`-` reads stdin as one document); every
  document is followed by the end-of-text token. Train and val are split by
  document: round(F x documents) of them (at least 1 when F > 0, never all),
  chosen by --seed, go to val. With a single input document the split is by
  position instead: its last F (cut at the start of a line) goes to val.

Output:
  <output-dir>/train_000000.h5, train_000001.h5, ... and val_000000.h5, ...
  each holding --shard-tokens tokens (the last one fewer); a document may
  continue into the next shard. Existing train_*.h5 / val_*.h5 files in the
  directory stop the command unless --overwrite is given.

Examples:
  ratchet shard --tokenizer byte --input book.txt --output-dir data/
  ratchet shard --input 'docs/*.txt' --output-dir data/ --overwrite
  ratchet shard --input docs/*.txt --output-dir data/ --val-fraction 0.05 --seed 7
  cat notes.txt | ratchet shard --input - --output-dir data/ --val-fraction 0
)";

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// Expands --input values into a list of paths ("-" kept as is), checking each
// names a readable, non-directory file.
std::vector<std::string> expand_inputs(const std::vector<std::string>& values) {
  std::vector<std::string> paths;
  int stdin_count = 0;
  for (const std::string& v : values) {
    if (v == "-") {
      if (++stdin_count > 1) fail("--input '-' (stdin) is given more than once");
      paths.push_back(v);
      continue;
    }
    struct stat st;
    if (::stat(v.c_str(), &st) != 0 && has_glob_chars(v)) {
      glob_t g{};
      int rc = ::glob(v.c_str(), 0, nullptr, &g);
      std::vector<std::string> matches;
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) matches.emplace_back(g.gl_pathv[i]);
      ::globfree(&g);
      if (matches.empty()) fail("--input '", v, "' matches no file: check the path");
      std::sort(matches.begin(), matches.end());
      paths.insert(paths.end(), matches.begin(), matches.end());
    } else {
      paths.push_back(v);
    }
  }
  for (const std::string& p : paths) {
    if (p == "-") continue;
    struct stat st;
    if (::stat(p.c_str(), &st) != 0)
      fail("cannot open --input '", p, "': ", std::strerror(errno));
    if (S_ISDIR(st.st_mode))
      fail("--input '", p, "' is a directory: pass the files in it, e.g. '", p, "/*.txt'");
    if (::access(p.c_str(), R_OK) != 0)
      fail("cannot read --input '", p, "': ", std::strerror(errno));
  }
  return paths;
}

std::string read_input(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (text.empty()) fail("--input '-': stdin is empty, nothing to tokenize");
    return text;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open --input '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("cannot read --input '", path, "': ", std::strerror(errno));
  text = ss.str();
  if (text.empty()) fail("--input '", path, "' is empty: nothing to tokenize, remove it");
  return text;
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

void prepare_output_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create --output-dir '", dir, "': ", ec.message());
  if (!fs::is_directory(dir, ec)) fail("--output-dir '", dir, "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("--output-dir '", dir, "' is not writable: ", std::strerror(errno),
         "; choose another directory");
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    bool shard = (name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) &&
                 name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0;
    if (shard) old.push_back(e.path());
  }
  if (ec) fail("cannot list --output-dir '", dir, "': ", ec.message());
  if (old.empty()) return;
  if (!overwrite)
    fail("--output-dir '", dir, "' already holds shards (", old.front().string(),
         "): choose an empty directory or pass --overwrite to replace them");
  for (const auto& p : old)
    if (!fs::remove(p, ec) && ec)
      fail("cannot remove old shard ", p.string(), ": ", ec.message());
}

}  // namespace

int cmd_shard(int argc, char** argv) {
  ShardOptions o;
  po::options_description desc("ratchet shard: tokenize text into HDF5 token shards\n\noptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("config", po::value<std::string>(), "INI file of these options (long names, no dashes)")
    ("tokenizer", po::value(&o.tokenizer)->default_value(o.tokenizer),
       "tokenizer: byte (ids 0..255 = bytes, 256 = end-of-text, vocab 257)")
    ("input,i", po::value(&o.inputs)->multitoken()->required(),
       "input text files (one document each), globs, or - for stdin")
    ("output-dir,o", po::value(&o.output_dir)->required(), "directory for the shards (created)")
    ("val-fraction", po::value(&o.val_fraction)->default_value(o.val_fraction),
       "fraction F in [0, 1) of the documents for validation (see below)")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed of the train/val document split")
    ("shard-tokens", po::value(&o.shard_tokens)->default_value(o.shard_tokens),
       "tokens per shard file")
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

  auto tok = make_tokenizer(o.tokenizer, "--tokenizer");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    fail("--val-fraction ", o.val_fraction, " is outside [0, 1): pass e.g. 0.1, or 0 for no val");
  if (o.shard_tokens == 0) fail("--shard-tokens 0: pass a positive number of tokens per shard");

  std::vector<std::string> inputs = expand_inputs(o.inputs);
  prepare_output_dir(o.output_dir, o.overwrite);

  ShardMeta meta{tok->name(), tok->vocab_size(), tok->eot_token()};
  auto report = [](const ShardSummary& s) {
    std::printf("wrote %s: %llu tokens, %llu documents\n", s.path.c_str(),
                (unsigned long long)s.tokens, (unsigned long long)s.documents);
    std::fflush(stdout);
  };
  ShardStreamWriter train(o.output_dir, "train", meta, o.shard_tokens, report);
  ShardStreamWriter val(o.output_dir, "val", meta, o.shard_tokens, report);
  size_t train_docs = 0, val_docs = 0;

  if (inputs.size() == 1) {
    std::string text = read_input(inputs[0]);
    if (o.val_fraction > 0) {
      size_t cut = single_document_cut(text, o.val_fraction, inputs[0]);
      train.add_document(tok->encode(text.substr(0, cut)));
      val.add_document(tok->encode(text.substr(cut)));
      train_docs = val_docs = 1;
    } else {
      train.add_document(tok->encode(text));
      train_docs = 1;
    }
  } else {
    std::vector<bool> to_val = choose_val(inputs.size(), o.val_fraction, o.seed);
    for (size_t i = 0; i < inputs.size(); i++) {
      (to_val[i] ? val : train).add_document(tok->encode(read_input(inputs[i])));
      (to_val[i] ? val_docs : train_docs)++;
    }
  }
  train.finish();
  val.finish();
  std::printf("shard: %zu train documents (%llu tokens, %zu shards), %zu val documents "
              "(%llu tokens, %zu shards), tokenizer %s in %s\n",
              train_docs, (unsigned long long)train.total_tokens(), train.shards().size(),
              val_docs, (unsigned long long)val.total_tokens(), val.shards().size(),
              meta.tokenizer.c_str(), o.output_dir.c_str());
  return kExitOk;
}

}  // namespace ratchet
