#include "train/jsonl_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ratchet {

JsonlLog::JsonlLog(const std::string& path, bool append) {
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_) fail("cannot open --log-jsonl ", path, " for writing: ", std::strerror(errno));
}

JsonlLog::~JsonlLog() {
  if (f_) std::fclose(f_);
}

void JsonlLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  if (!f_) return;
  std::fputc('{', f_);
  for (size_t i = 0; i < fields.size(); i++) {
    const double v = fields[i].second;
    std::fprintf(f_, "%s\"%s\": ", i ? ", " : "", fields[i].first.c_str());
    if (!std::isfinite(v))
      std::fputs("null", f_);
    else if (v == std::floor(v) && std::fabs(v) < 1e15)
      std::fprintf(f_, "%.0f", v);
    else
      std::fprintf(f_, "%.9g", v);
  }
  std::fputs("}\n", f_);
  std::fflush(f_);
}

}  // namespace ratchet
