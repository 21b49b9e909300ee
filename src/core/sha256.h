// SHA-256 (OpenSSL's EVP), the one implementation: a tokenizer.json's digest
// (tokenizer/json/load.cpp), the --init-from tokenizer check
// (train/tokenizer_checks.cpp), and the sources and tokenizer files that
// shards record in their provenance (data_tools/).
#pragma once
#include <string>

namespace ratchet {

// Lower-case hex SHA-256 of `data`.
std::string sha256_hex(const std::string& data);
// SHA-256 of a file's bytes, read 1 MiB at a time; Error naming the file
// when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace ratchet
