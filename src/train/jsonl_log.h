// A JSON-lines metrics log: one object per line, flushed after each, so a
// killed run keeps every line it wrote.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ratchet {

class JsonlLog {
 public:
  JsonlLog() = default;
  // Truncates, or appends when `append` (a resumed run continues its log).
  // Throws Error if the file cannot be opened.
  explicit JsonlLog(const std::string& path, bool append = false);
  ~JsonlLog();
  JsonlLog(const JsonlLog&) = delete;
  JsonlLog& operator=(const JsonlLog&) = delete;
  bool enabled() const { return f_ != nullptr; }
  // Writes {"k1":v1,...} on one line; values are numbers (integral ones as
  // integers, non-finite ones as null).
  void write(const std::vector<std::pair<std::string, double>>& fields);

 private:
  FILE* f_ = nullptr;
};

}  // namespace ratchet
