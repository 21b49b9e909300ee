// SHA-256 checksums (OpenSSL's EVP) of the sources and tokenizer files that
// shards record in their provenance attributes.
#pragma once
#include <string>

namespace ratchet {

// Lower-case hex SHA-256 of `data`.
std::string sha256_hex(const std::string& data);
// SHA-256 of a file's bytes; Error naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace ratchet
