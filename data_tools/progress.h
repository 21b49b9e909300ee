// A one-line progress bar on stderr for long data work:
//   tokenize [#########.........]  47%  1.2 GB/2.5 GB  8.1k docs/s  3.4M tok/s  52.3 MB/s  ETA 0:25
// Redrawn at most 5 times a second with '\r'; only when enabled (by default
// when stderr is a terminal), so logs and tests stay clean.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace ratchet {

class ProgressBar {
 public:
  // `total_bytes`: the work's size, for the percentage and the ETA.
  ProgressBar(std::string label, uint64_t total_bytes, bool enabled);
  ~ProgressBar();
  // Adds finished work and redraws if due.
  void add(uint64_t docs, uint64_t tokens, uint64_t bytes);
  // Draws the final state and ends the line.
  void finish();
  // The line as it would be drawn now (for tests and the final summary).
  std::string line() const;
  double elapsed() const;
  uint64_t docs() const { return docs_; }
  uint64_t tokens() const { return tokens_; }
  uint64_t bytes() const { return bytes_; }

  // Default for `enabled`: stderr is a terminal.
  static bool stderr_is_tty();

 private:
  std::string label_;
  uint64_t total_, docs_ = 0, tokens_ = 0, bytes_ = 0;
  bool enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1.2 GB", "3.4M", "0:25" style helpers (also used by inspect).
std::string human_bytes(double bytes);
std::string human_count(double n);
std::string human_duration(double seconds);

}  // namespace ratchet
