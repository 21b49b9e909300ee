// core/sha256.h, the one SHA-256: FIPS 180-2's test vectors, a file read in
// several 1 MiB blocks against the same bytes hashed in memory, and an
// unreadable file named in the error.
#include <gtest/gtest.h>

#include <string>

#include "core/sha256.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

namespace ratchet {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a': the digest must carry over many internal blocks.
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileInBlocksEqualsMemory) {
  testing::TempDir d;
  // 2.5 MiB: three reads of the 1 MiB buffer, the last one partial.
  std::string bytes((5u << 20) / 2, '\0');
  for (size_t i = 0; i < bytes.size(); i++) bytes[i] = (char)(i * 131 + (i >> 11));
  testing::write_file(d / "blob", bytes);
  EXPECT_EQ(sha256_file(d / "blob"), sha256_hex(bytes));
  testing::write_file(d / "empty", "");
  EXPECT_EQ(sha256_file(d / "empty"), sha256_hex(""));
}

TEST(Sha256, UnreadableFileIsNamed) {
  testing::TempDir d;
  testing::expect_error([&] { sha256_file(d / "missing.json"); }, {d / "missing.json"});
}

}  // namespace
}  // namespace ratchet
