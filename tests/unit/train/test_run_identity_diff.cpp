// run_identity_diff and check_same_run (src/train/run_identity_diff.h): the
// diff a resume of another run is refused with, one line per differing
// field; a checkpoint from before shard content checks not compared on them;
// another model refused first, naming the field.
#include <gtest/gtest.h>

#include <string>

#include "testing/expect_error.h"
#include "testing/tiny_model.h"
#include "train/run_identity_diff.h"

namespace ratchet {
namespace {

TEST(RunIdentityDiff, OneLinePerDifferingFieldInKeyOrder) {
  const RunFields ckpt = {{"seed", "1"}, {"seq_len", "64"}, {"train_shards", "2"}};
  EXPECT_EQ(run_identity_diff(ckpt, ckpt), "");
  const RunFields run = {{"seed", "2"}, {"seq_len", "64"}, {"train_shards", "2"}, {"zz", "new"}};
  EXPECT_EQ(run_identity_diff(ckpt, run),
            "\n  seed: checkpoint has '1', this run has '2'"
            "\n  zz: checkpoint has '(unset)', this run has 'new'");
}

TEST(RunIdentityDiff, ShardContentsOnlyWhenTheCheckpointRecordsThem) {
  const RunFields run = {{"train_shards", "1"}, {"train_shard_0", "a.h5 tokens=9 crc32=0000000a"}};
  // An old checkpoint (no train_shards): neither the shard count nor the
  // contents are compared (every train_shard* field).
  const RunFields old_ckpt = {{"seed", "1"}};
  EXPECT_EQ(run_identity_diff(old_ckpt, run), "");
  // A checkpoint that records them: a changed shard is named.
  const RunFields ckpt = {{"train_shards", "1"}, {"train_shard_0", "a.h5 tokens=9 crc32=0000000b"}};
  EXPECT_NE(run_identity_diff(ckpt, run).find("train_shard_0: checkpoint has 'a.h5 tokens=9 crc32=0000000b'"),
            std::string::npos);
}

TEST(CheckSameRun, AnotherModelThenAnotherRunAreRefused) {
  CheckpointMeta meta;
  meta.step = 40;
  meta.model = testing::tiny_config(2, 2, 16);
  meta.identity = {{"train_shards", "1"}, {"seed", "1"}};
  const RunFields same = meta.identity;
  check_same_run(meta, meta.model, same, {}, "ckpt");  // the same run: no error
  testing::expect_error(
      [&] { check_same_run(meta, testing::tiny_config(3, 2, 16), same, {}, "runs/a/ckpt"); },
      {"the checkpoint at step 40 in runs/a/ckpt is of another model", "--resume never"});
  testing::expect_error(
      [&] { check_same_run(meta, meta.model, {{"train_shards", "1"}, {"seed", "7"}}, {}, "ckpt"); },
      {"belongs to a different run", "seed: checkpoint has '1', this run has '7'"});
}

}  // namespace
}  // namespace ratchet
