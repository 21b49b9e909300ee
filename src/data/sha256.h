// SHA-256 (FIPS 180-4), for the source-file checksums recorded in shards.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ratchet {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // Lower-case hex of the digest; the object is spent afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& data);
// SHA-256 of a file's bytes; Error naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace ratchet
