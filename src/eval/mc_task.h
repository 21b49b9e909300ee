// Multiple-choice tasks (HellaSwag and its kin): the example files, loaded
// and tokenized for scoring (eval/mc_score.h). Used by `ratchet eval`
// (cli/cmd_eval.cpp) and by the training loop's --eval-task
// (train/eval_suite.h).
//
// Each example is a context and N endings; completion k is
//   context + " " + ending[k]      (joined as lm-evaluation-harness joins them)
// tokenized with the model's tokenizer as the harness does: the context's
// trailing whitespace moves to the continuation, then
//   whole = ids(context + continuation), ending ids = whole[len(ids(context)):]
// An empty context is the end-of-text token, as in the harness.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ratchet {

struct McExample {
  std::vector<uint32_t> context;                 // ids of the context (or {eot} when empty)
  std::vector<std::vector<uint32_t>> endings;    // ids of " " + ending, per ending
  std::vector<size_t> ending_chars;              // code points of each ending, no joining space
  int label = 0;                                 // the right ending
  long line = 0;                                 // 1-based line (jsonl) or record index (.bin)
};

struct McTask {
  std::string name, path;
  std::string format;  // "hellaswag-jsonl", "generic-jsonl" or "llmc-bin"
  std::vector<McExample> examples;
  size_t max_endings = 0;  // the most endings of any example
};

// Loads one of the three formats, detected by content:
//   llm.c's HellaSwag .bin: int32 magic 20240522 at offset 0, a 256-int32 header
//     (header[1] version 1, header[2] examples, header[3] longest example), then
//     per example uint16: <START 65535> <bytes> <index> <label> <num_completions>
//     <ctx_len> <ctx ids> then per completion <len> <ids> (dev/data/hellaswag.py's
//     write_evalfile). Ids are GPT-2's (the ending ids include the leading
//     space): a tokenizer other than gpt2 is refused; the endings' characters
//     for acc_norm come from decoding them.
//   HellaSwag's own jsonl: objects with `ctx`, `endings`, `label`
//   a generic jsonl: objects with `context`, `choices`, `label`
// Every id must be < vocab_size (the model's): else an Error naming the file,
// the line and what to pass. Errors (exit 2) name the file and the line for a
// malformed line, a line that is not UTF-8, a label out of range, a missing
// field, fewer than 2 endings, an empty file.
McTask load_mc_task(const std::string& name, const std::string& path, const Tokenizer& tok,
                    int vocab_size);

}  // namespace ratchet
