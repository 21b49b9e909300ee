// The stages of `ratchet shard`, in the order cmd_shard.cpp runs them:
//
//   gather_sources   read every input into documents (text_source.h), report
//                    skipped empty and invalid UTF-8 documents
//   dedup_documents  remove exact / near duplicates (dedup.h) and write the
//                    dedup report (JSONL)
//   split_documents  choose train/val by document (seeded), or cut a single
//                    document by position
//   tokenize_block   tokenize the next ~16 MB of pieces on all cores
//                    (parallel_tokenize.h; identical for any thread count)
//   write_shards     drive tokenize_block and append each block to the train
//                    and val ShardStreamWriters (shard_writer.h), which write
//                    <output-dir>/train_NNNNNN.h5 and val_NNNNNN.h5 atomically
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shard_format.h"
#include "data/tokenizer.h"
#include "data_tools/text_source.h"

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
  // this size, cut where the tokenizer allows (safe_cuts: byte, gpt2), so a
  // long document's ids are never held whole and writing overlaps tokenizing.
  size_t part_bytes = size_t(4) << 20;
};

// A document, or the train or val part of a single one, bound for one split;
// or a part of either (first: the document starts here, last: it ends here).
struct ShardPiece {
  size_t doc;
  size_t begin, end;  // byte range of the document's text
  bool val;
  bool first = true, last = true;
};

// What every shard records about its tokens: the tokenizer's name, vocab and
// EOS (eot_token), the tokenizer.json digest, and the document framing:
// --add-bos / --add-eos, else the tokenizer's own (a Hugging Face
// tokenizer's post-processor or tokenizer_config.json; byte and gpt2: EOS
// only). A tokenizer that adds neither gets an EOS after each document, so
// that documents stay apart. Error naming the flag when the tokenizer has no
// such token, or for --parse-special on a tokenizer without special tokens.
ShardMeta shard_meta(const ShardOptions& o, const Tokenizer& tok);

// Creates --output-dir, refuses (or with --overwrite removes) old shards and
// removes temporary files a crashed run left.
void prepare_output_dir(const std::string& dir, bool overwrite);

// Reads `inputs` (--input expanded by expand_text_inputs) into documents.
TextCorpus gather_sources(const ShardOptions& o, const std::vector<std::string>& inputs);

// What every shard records about where it came from: the tool version, the
// sources and (gpt2) the tokenizer files, with their SHA-256.
ShardProvenance shard_provenance(const TextCorpus& corpus, const Tokenizer& tok);

// removed[i]: document i is a duplicate of an earlier kept one. Writes the
// report and fills prov's dedup counts; all false for --dedup none.
std::vector<bool> dedup_documents(const ShardOptions& o, const TextCorpus& corpus,
                                  ShardProvenance& prov);

// Which of n documents go to val: a seeded shuffle picks round(fraction·n) of
// them, at least one when fraction > 0 and never all.
std::vector<bool> choose_val(size_t n, double fraction, uint64_t seed);
// Where a single document is cut: val gets text[cut:], about the last
// `fraction` of it, starting at a line start when there is one.
size_t single_document_cut(const std::string& text, double fraction, const std::string& name);
// The pieces of the kept documents, in input order, each marked train or val.
std::vector<ShardPiece> split_documents(const ShardOptions& o, const TextCorpus& corpus,
                                        const std::vector<bool>& removed);

// Pieces longer than part_bytes cut into parts at safe_cuts (none for
// tokenizers that do not allow it: those pieces stay whole).
std::vector<ShardPiece> cut_long_pieces(const std::vector<ShardPiece>& pieces,
                                        const TextCorpus& corpus, const Tokenizer& tok,
                                        size_t part_bytes);

// Pieces [a, b) of `pieces` tokenized: ids[i - a] belongs to pieces[i].
struct TokenizedBlock {
  size_t a = 0, b = 0, bytes = 0;
  std::vector<std::string> cut_text;  // texts of pieces that are part of a document
  std::vector<std::vector<uint32_t>> ids;
};
// Starts at piece a and takes pieces until about `block_bytes` of text.
std::unique_ptr<TokenizedBlock> tokenize_block(const TextCorpus& corpus,
                                               const std::vector<ShardPiece>& pieces, size_t a,
                                               const Tokenizer& tok, int threads,
                                               size_t block_bytes);

struct ShardTotals {
  size_t train_docs = 0, val_docs = 0, train_shards = 0, val_shards = 0;
  uint64_t train_tokens = 0, val_tokens = 0, text_bytes = 0;
  double seconds = 0;
};
// Tokenizes block k+1 while block k is appended to the shards (whose
// writers compress and store chunks on their own background threads);
// prints a line per shard written.
ShardTotals write_shards(const ShardOptions& o, const TextCorpus& corpus,
                         const std::vector<ShardPiece>& pieces, const Tokenizer& tok,
                         const ShardProvenance& prov);

// The whole pipeline, with its summary lines on stdout.
void run_shard_pipeline(const ShardOptions& o, const Tokenizer& tok);

}  // namespace ratchet
