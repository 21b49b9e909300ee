#include "core/small_text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace ratchet {

std::string read_small_text_file(const std::string& path, const std::string& flag,
                                 uint64_t max_bytes) {
  const std::string name = flag.empty() ? path : flag + " " + path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(name, " is a directory: give the INI file");
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) fail(name, ": cannot read the file (", std::strerror(errno), ")");
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    if (text.size() + n > max_bytes)
      fail(name, " is larger than ", max_bytes >> 20, " MiB: an INI of options is a few "
           "KB; is it the right file?");
    text.append(buf, n);
  }
  if (std::ferror(f.get())) fail(name, ": cannot read the file (", std::strerror(errno), ")");
  return text;
}

}  // namespace ratchet
