// The stages of `ratchet shard`, in the order run_shard_pipeline runs them.
// Memory does not grow with the size of the input: inputs are read twice,
// in chunks (text_stream.h), and never held whole.
//
//   scan_inputs      first pass: every input's documents (text_stream.h),
//                    their dedup digests (dedup.h: exact and near decided
//                    one document at a time, the report written as it
//                    goes), empty and invalid UTF-8 documents, the sources'
//                    SHA-256; stdin and pipes are spooled to --output-dir.
//                    Keeps per document one byte of flags and its place
//                    (file, line) for the report: O(documents), plus the
//                    dedup state of dedup.h
//   choose_split     train/val by document (seeded, needs the count), or the
//                    cut of a single document by position
//   write_shards     second pass: a reader thread streams the documents
//                    again (checking each file is unchanged), cuts long ones
//                    into ~part_bytes parts where the tokenizer allows
//                    (DocumentCutter) and hands blocks of parts to the
//                    tokenizer threads (parallel_tokenize.h; identical for
//                    any thread count); each tokenized block is appended to
//                    the train and val ShardStreamWriters (shard_writer.h)
//                    while the next is tokenized. At most a few blocks are
//                    in flight (kQueuedBlocks)
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/shard_format.h"
#include "tokenizer/tokenizer.h"
#include "data_tools/text_source.h"
#include "data_tools/text_stream.h"

namespace ratchet {

// Everything `ratchet shard` can be told (validated by cmd_shard.cpp).
struct ShardOptions {
  std::string tokenizer = "byte";  // byte, gpt2, or a tokenizer.json (or its directory)
  std::string vocab, merges;
  // Document framing: "on", "off", or "" for the tokenizer's own choice (see
  // shard_meta); parse_special: text spelling a special token becomes it.
  std::string add_bos, add_eos;
  bool parse_special = false;
  std::vector<std::string> inputs;
  std::string jsonl_field, separator;
  bool blank_lines = false;
  std::string empty_docs = "skip";
  std::string output_dir;
  double val_fraction = 0.1;
  uint64_t seed = 1337;
  uint64_t shard_tokens = 100000000;
  bool overwrite = false;
  int threads = 0;  // resolved: > 0 after validation
  std::string dedup = "none";
  double near_threshold = 0.8;
  std::string dedup_report;
  bool show_progress = false;
  // Documents longer than this are tokenized and written in parts of about
  // this size, cut where the tokenizer allows (DocumentCutter): a long
  // document is never held whole, and its parts go to different threads.
  size_t part_bytes = size_t(256) << 10;
};

// Per document of the input streams (in order, empty ones included).
enum DocFlags : uint8_t { kDocBlank = 1, kDocRemoved = 2, kDocVal = 4 };

// What the first pass found.
struct ScanResult {
  std::vector<std::string> inputs;      // as given ("-": stdin)
  std::vector<std::string> read_paths;  // what the second pass reads (a spool for stdin/pipes)
  std::vector<InputRead> reads;         // size and SHA-256 of each input
  std::vector<uint8_t> flags;           // per document (DocFlags)
  uint64_t invalid_utf8 = 0;            // documents that are not valid UTF-8
  std::string first_invalid;            // where the first is
  uint64_t kept = 0, kept_bytes = 0;    // documents to shard and their bytes
  // The first kept document: its index, length and last '\n' before its
  // last byte (-1: none), for the split of a single document.
  size_t first_kept = SIZE_MAX;
  uint64_t first_bytes = 0;
  int64_t first_last_nl = -1;
  std::string first_where;
  // The single document's train/val cut (choose_split): a position, or the
  // first '\n' at or after split_from (split_at == UINT64_MAX).
  bool single_split = false;
  uint64_t split_at = 0, split_from = 0;
};

// What every shard records about its tokens: the tokenizer's name, vocab and
// EOS (eot_token), the tokenizer.json digest, and the document framing:
// --add-bos / --add-eos, else the tokenizer's own (a Hugging Face
// tokenizer's post-processor or tokenizer_config.json; byte and gpt2: EOS
// only). A tokenizer that adds neither gets an EOS after each document, so
// that documents stay apart. Error naming the flag when the tokenizer has no
// such token, or for --parse-special on a tokenizer without special tokens.
ShardMeta shard_meta(const ShardOptions& o, const Tokenizer& tok);

// Creates --output-dir, refuses old shards (with --overwrite returns them, for
// the caller to set aside until the new ones are complete), refuses a
// directory holding shards an --overwrite run set aside, and removes temporary
// files and spools crashed runs left.
std::vector<std::filesystem::path> prepare_output_dir(const std::string& dir, bool overwrite);

// The first pass over `inputs` (--input expanded by expand_text_inputs):
// fills prov's sources and dedup counts, writes the dedup report, prints
// the skipped/invalid/dedup lines. Spool files go to o.output_dir.
ScanResult scan_inputs(const ShardOptions& o, const std::vector<std::string>& inputs,
                       ShardProvenance& prov);

// The tokenizer files (and their SHA-256) every shard records.
void tokenizer_provenance(const Tokenizer& tok, ShardProvenance& prov);

// Which of n documents go to val: a seeded shuffle picks round(fraction·n) of
// them, at least one when fraction > 0 and never all.
std::vector<bool> choose_val(size_t n, double fraction, uint64_t seed);
// Where a single document of n bytes is cut: val gets [cut, n), about the
// last `fraction` of it, starting at a line start when there is one.
// last_nl: its last '\n' before byte n-1 (-1: none). *from_nl: the cut is
// the byte after the first '\n' at or after the returned position (found
// while reading); else the returned position is the cut.
uint64_t single_document_cut(uint64_t n, int64_t last_nl, double fraction, const std::string& name,
                             bool* from_nl);
// The same on a whole text (tests).
size_t single_document_cut(const std::string& text, double fraction, const std::string& name);
// Sets kDocVal in scan.flags (or scan.single_split).
void choose_split(const ShardOptions& o, ScanResult& scan);

struct ShardTotals {
  size_t train_docs = 0, val_docs = 0, train_shards = 0, val_shards = 0;
  uint64_t train_tokens = 0, val_tokens = 0, text_bytes = 0;
  double seconds = 0;
  // Input without a token (tokenizer/json/unknown_counts.h): bytes that
  // became the unk token, characters dropped (no unk token).
  uint64_t unk_bytes = 0, dropped_chars = 0;
};
// The second pass: reads, tokenizes and writes; prints a line per shard.
ShardTotals write_shards(const ShardOptions& o, const ScanResult& scan, const Tokenizer& tok,
                         const ShardProvenance& prov);

// The whole pipeline, with its summary lines on stdout.
void run_shard_pipeline(const ShardOptions& o, const Tokenizer& tok);

}  // namespace ratchet
