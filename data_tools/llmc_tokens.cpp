#include "data_tools/llmc_tokens.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ratchet {

bool is_llmc_tokens_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  int32_t magic = 0;
  bool ok = std::fread(&magic, sizeof magic, 1, f) == 1 && magic == kLlmcMagic;
  std::fclose(f);
  return ok;
}

std::vector<uint32_t> read_llmc_tokens(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open llm.c token file ", path, ": ", std::strerror(errno));
  int32_t header[kLlmcHeaderInts];
  if (std::fread(header, sizeof(int32_t), kLlmcHeaderInts, f) != kLlmcHeaderInts) {
    std::fclose(f);
    fail(path, " is shorter than llm.c's 1024-byte header: it is not an llm.c token file");
  }
  if (header[0] != kLlmcMagic) {
    std::fclose(f);
    fail(path, " has magic ", header[0], ", not llm.c's ", kLlmcMagic,
         ": it is not an llm.c token file");
  }
  if (header[1] != kLlmcVersion) {
    std::fclose(f);
    fail(path, " is llm.c token format version ", header[1], "; only version ", kLlmcVersion,
         " (uint16 tokens) is supported");
  }
  if (header[2] < 0) {
    std::fclose(f);
    fail(path, " has a negative token count ", header[2], " in its header: the file is corrupt");
  }
  const uint64_t n = (uint64_t)(uint32_t)header[2];
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  const uint64_t want = kLlmcHeaderInts * 4 + 2 * n;
  if (!ec && size != want) {
    std::fclose(f);
    fail(path, " should be ", want, " bytes for the ", n, " tokens its header announces but is ",
         size, (size < want ? ": it is truncated" : ": it has trailing bytes"));
  }
  std::vector<uint16_t> t16(n);
  if (n && std::fread(t16.data(), 2, n, f) != n) {
    std::fclose(f);
    fail("cannot read the tokens of ", path, ": the file is truncated");
  }
  std::fclose(f);
  return std::vector<uint32_t>(t16.begin(), t16.end());
}

void write_llmc_tokens(const std::string& path, const std::vector<uint32_t>& tokens) {
  if (tokens.size() > (uint64_t)INT32_MAX)
    fail("cannot write ", path, ": ", tokens.size(), " tokens exceed llm.c's int32 count");
  std::vector<uint16_t> t16(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) {
    if (tokens[i] > 65535)
      fail("cannot write ", path, ": token ", i, " is ", tokens[i],
           ", which llm.c's uint16 format cannot hold");
    t16[i] = (uint16_t)tokens[i];
  }
  int32_t header[kLlmcHeaderInts] = {kLlmcMagic, kLlmcVersion, (int32_t)tokens.size()};
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::string tmp = (dir / ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot create ", path, " (as ", tmp, "): ", std::strerror(errno));
  bool ok = std::fwrite(header, sizeof header, 1, f) == 1 &&
            (t16.empty() || std::fwrite(t16.data(), 2, t16.size(), f) == t16.size());
  int err = errno;
  ok = (std::fflush(f) == 0) && ok;
  if (ok && ::fsync(fileno(f)) != 0 && errno != EINVAL) ok = false, err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("cannot write ", path, ": ", std::strerror(err ? err : EIO));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    fail("cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

std::vector<uint64_t> doc_offsets_from_eot(const std::vector<uint32_t>& tokens, uint32_t eot) {
  std::vector<uint64_t> off;
  if (tokens.empty()) return off;
  off.push_back(0);
  for (size_t i = 0; i + 1 < tokens.size(); i++)
    if (tokens[i] == eot) off.push_back(i + 1);
  return off;
}

}  // namespace ratchet
