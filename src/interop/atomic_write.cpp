#include "interop/atomic_write.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ratchet {

void write_atomically(const std::string& path, const std::function<bool(FILE*)>& body) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write ", tmp, " (for ", path, "): ", std::strerror(errno));
  bool ok = body(f);
  ok = (std::fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("writing ", path, " failed (disk full?): ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

void write_text_atomically(const std::string& path, const std::string& text) {
  write_atomically(path, [&](FILE* f) { return std::fwrite(text.data(), 1, text.size(), f) == text.size(); });
}

}  // namespace ratchet
