// A JSON-lines metrics log: one object per line, each written with one
// write(2), so a killed run keeps every line it wrote.
//
// A full disk or an I/O error never stops the run (the checkpoint is what
// matters): the first failed write is reported once on stderr, a partly
// written line is cut back so the file holds only whole lines, and later
// lines are still tried. Opening for append cuts a torn last line left by an
// earlier process (with a warning), so resumed lines never follow one.
#pragma once
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
  bool enabled() const { return fd_ >= 0; }
  // Writes {"k1":v1,...} on one line; values are numbers (integral ones as
  // integers, non-finite ones as null).
  void write(const std::vector<std::pair<std::string, double>>& fields);

 private:
  void write_line(const std::string& line);

  std::string path_;
  int fd_ = -1;
  bool warned_ = false;
};

}  // namespace ratchet
