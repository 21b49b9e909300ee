#include "data_tools/parallel_tokenize.h"

#include <algorithm>
#include <cstddef>
#include <exception>

#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace ratchet {
namespace {
bool printable_ascii(char c) { return c >= 0x21 && c <= 0x7E; }
}  // namespace

DocumentCutter::DocumentCutter(const Tokenizer& tok) {
  const std::string name = tok.name();
  if (name == "byte") {
    kind_ = kByte;
  } else if (auto* g = dynamic_cast<const Gpt2Tokenizer*>(&tok)) {
    // Its engine's ByteLevel regex is GPT-2's: SafeCutter's pieces mode, whose
    // cuts include the newline rule below and also [letter | space], so a
    // long line is cut too.
    hf_ = std::make_unique<hf::SafeCutter>(g->engine().engine());
    kind_ = hf_->can_cut() ? kHf : kGpt2;
  } else if (name == "gpt2") {
    kind_ = kGpt2;
  } else if (auto* h = dynamic_cast<const HfTokenizer*>(&tok)) {
    hf_ = std::make_unique<hf::SafeCutter>(h->engine());
    if (hf_->can_cut()) kind_ = kHf;
  }
}

DocumentCutter::~DocumentCutter() = default;

size_t DocumentCutter::lookahead() const {
  switch (kind_) {
    case kHf: return hf_->window() + 1;
    case kGpt2: return 1;
    default: return 0;
  }
}

bool DocumentCutter::find(std::string_view text, size_t from, bool complete, TextCut* cut) const {
  from = std::max<size_t>(from, 1);
  switch (kind_) {
    case kNone: return false;
    case kHf: return hf_->find(text, from, complete, cut);
    case kByte:
      if (from >= text.size()) return false;
      *cut = {from, from};
      return true;
    case kGpt2:
      // The first p >= from with text[p-2] printable, text[p-1] == '\n',
      // text[p] printable: GPT-2's pre-tokenizer ends a piece after such a
      // newline and starts afresh.
      for (size_t p = std::max<size_t>(from, 2); p < text.size();) {
        size_t nl = text.find('\n', p - 1);
        if (nl == std::string_view::npos || nl + 1 >= text.size()) return false;
        p = nl + 1;
        if (nl >= 1 && printable_ascii(text[nl - 1]) && printable_ascii(text[p])) {
          *cut = {p, p};
          return true;
        }
        p++;
      }
      return false;
  }
  return false;
}

std::vector<TextCut> DocumentCutter::cuts(std::string_view text, size_t part_bytes) const {
  return hf::cuts_every(*this, text, part_bytes);
}

std::vector<TextCut> safe_cuts(const Tokenizer& tok, const std::string& text, size_t piece_bytes) {
  return DocumentCutter(tok).cuts(text, piece_bytes);
}

void tokenize_parallel(const Tokenizer& tok, const std::vector<const std::string*>& docs,
                       int threads, std::vector<std::vector<uint32_t>>& out, size_t piece_bytes,
                       const DocumentCutter* cutter) {
  std::unique_ptr<DocumentCutter> own;
  if (!cutter) {
    own = std::make_unique<DocumentCutter>(tok);
    cutter = own.get();
  }
  struct Task {
    size_t doc, begin, end;
  };
  std::vector<Task> tasks;
  std::vector<size_t> first_task(docs.size() + 1);
  for (size_t d = 0; d < docs.size(); d++) {
    first_task[d] = tasks.size();
    const std::string& t = *docs[d];
    size_t begin = 0;
    if (t.size() > 2 * piece_bytes)
      for (const TextCut& c : cutter->cuts(t, piece_bytes)) {
        tasks.push_back({d, begin, c.end});
        begin = c.resume;
      }
    tasks.push_back({d, begin, t.size()});
  }
  first_task[docs.size()] = tasks.size();
  std::vector<std::vector<uint32_t>> results(tasks.size());
  // Dynamic scheduling: piece costs differ (a short document next to a 256 KiB
  // piece); each task writes only results[i], so the order does not matter.
  // An exception cannot leave an OpenMP region: the first one is kept and
  // rethrown after it, the other tasks then skip their work.
  std::exception_ptr error;
  bool failed = false;
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::max(1, threads))
  for (std::ptrdiff_t i = 0; i < (std::ptrdiff_t)tasks.size(); i++) {
    bool skip;
#pragma omp atomic read
    skip = failed;
    if (skip) continue;
    try {
      const Task& k = tasks[(size_t)i];
      const std::string& t = *docs[k.doc];
      results[(size_t)i] = (k.begin == 0 && k.end == t.size())
                               ? tok.encode(t)
                               : tok.encode(t.substr(k.begin, k.end - k.begin));
    } catch (...) {
#pragma omp critical(ratchet_tokenize_error)
      if (!failed) {
        error = std::current_exception();
#pragma omp atomic write
        failed = true;
      }
    }
  }
  if (error) std::rethrow_exception(error);
  out.assign(docs.size(), {});
  for (size_t d = 0; d < docs.size(); d++) {
    size_t a = first_task[d], b = first_task[d + 1];
    if (b - a == 1) {
      out[d] = std::move(results[a]);
      continue;
    }
    size_t total = 0;
    for (size_t i = a; i < b; i++) total += results[i].size();
    out[d].reserve(total);
    for (size_t i = a; i < b; i++) out[d].insert(out[d].end(), results[i].begin(), results[i].end());
  }
}

}  // namespace ratchet
