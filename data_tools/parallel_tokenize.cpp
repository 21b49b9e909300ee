#include "data_tools/parallel_tokenize.h"

#include <algorithm>
#include <cstddef>
#include <exception>

namespace ratchet {
namespace {
bool printable_ascii(char c) { return c >= 0x21 && c <= 0x7E; }
}  // namespace

std::vector<size_t> safe_cuts(const Tokenizer& tok, const std::string& text, size_t piece_bytes) {
  std::vector<size_t> cuts;
  const std::string name = tok.name();
  if (name != "byte" && name != "gpt2") return cuts;
  size_t want = piece_bytes;
  while (want < text.size()) {
    if (name == "byte") {
      cuts.push_back(want);
      want += piece_bytes;
      continue;
    }
    // The first p >= want with text[p-2] printable, text[p-1] == '\n',
    // text[p] printable (p is the start of the next piece).
    size_t p = want;
    bool found = false;
    while (p < text.size()) {
      size_t nl = text.find('\n', p - 1);
      if (nl == std::string::npos || nl + 1 >= text.size()) break;
      p = nl + 1;
      if (nl >= 1 && printable_ascii(text[nl - 1]) && printable_ascii(text[p])) {
        found = true;
        break;
      }
      p++;
    }
    if (!found) break;
    cuts.push_back(p);
    want = p + piece_bytes;
  }
  return cuts;
}

void tokenize_parallel(const Tokenizer& tok, const std::vector<const std::string*>& docs,
                       int threads, std::vector<std::vector<uint32_t>>& out, size_t piece_bytes) {
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
      for (size_t c : safe_cuts(tok, t, piece_bytes)) {
        tasks.push_back({d, begin, c});
        begin = c;
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
