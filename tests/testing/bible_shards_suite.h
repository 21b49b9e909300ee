// A GoogleTest fixture whose suite shares one directory of byte-level shards
// of Genesis 1-5 (shard_bible), made once per suite: the trainer tests
// (integration and mpi) run many tiny runs over the same data.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "testing/test_util.h"

namespace ratchet::testing {

class BibleShardsSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string err = shard_bible(*dir_, "Gen1:1-Gen5:32");
    ASSERT_EQ(err, "");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  inline static TempDir* dir_ = nullptr;  // data/train_*.h5, data/val_*.h5
};

}  // namespace ratchet::testing
