#include "train/jsonl_log.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/json.h"

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
  OrderedJson line = OrderedJson::object();
  for (const auto& [key, value] : fields) line[key] = json_number(value);
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), f_);
  std::fflush(f_);
}

}  // namespace ratchet
