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
  // The tiny run the MPI trainer tests compare (3 layers, 15 channels, T=16,
  // shuffled, eval every 4 steps): B rows per rank, `total` tokens per step;
  // logs to out_dir/log.jsonl and exports out_dir/out.bin.
  static std::string tiny_train_args(int B, int total, const std::string& out_dir, int steps) {
    return "train --model custom --layers 3 --heads 3 --channels 15 --max-seq-len 32 "
           "--seq-len 16 --batch-size " + std::to_string(B) + " --total-batch-tokens " +
           std::to_string(total) + " --threads 1 --train-data '" + (*dir_ / "data/train_*.h5") +
           "' --val-data '" + (*dir_ / "data/val_*.h5") + "' --eval-every 4 --eval-batches 6 "
           "--warmup-steps 2 --steps " + std::to_string(steps) + " --lr 3e-3 --quiet "
           "--log-jsonl " + out_dir + "/log.jsonl --export " + out_dir + "/out.bin";
  }
  inline static TempDir* dir_ = nullptr;  // data/train_*.h5, data/val_*.h5
};

}  // namespace ratchet::testing
