#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace ratchet {

namespace {

// One EVP digest context; OpenSSL failures here mean an unusable libcrypto.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      fail("OpenSSL: cannot start a SHA-256 digest (libcrypto unusable?)");
  }
  void update(const void* data, size_t n) {
    if (EVP_DigestUpdate(ctx_.get(), data, n) != 1) fail("OpenSSL: SHA-256 update failed");
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1) fail("OpenSSL: SHA-256 final failed");
    static const char* kHex = "0123456789abcdef";
    std::string out;
    out.reserve(2 * len);
    for (unsigned i = 0; i < len; i++) {
      out += kHex[md[i] >> 4];
      out += kHex[md[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

}  // namespace

std::string sha256_hex(const std::string& data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path, " to checksum it: ", std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(size_t(1) << 20);  // 1 MiB reads
  while (in) {
    in.read(buf.data(), (std::streamsize)buf.size());
    h.update(buf.data(), (size_t)in.gcount());
  }
  if (in.bad()) fail("cannot read ", path, " to checksum it: ", std::strerror(errno));
  return h.hex();
}

}  // namespace ratchet
