// A weighted --train-data mixture under `mpirun` (data/mixture.h): the draw
// is a function of (seed, global row), so 2 ranks draw the same rows per
// source as 1 rank accumulating 2 micro-batches, and a run stopped on 2 ranks
// resumes on 1 (another world size) drawing exactly the rows the straight
// 2-rank run drew: the checkpoints' per-source cursors and the ledgers'
// tokens per source are equal as integers. Parameters differ only by the
// order of the gradient sums (test_mpi_train.cpp's tolerance, 1e-5).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "ckpt/checkpoint.h"
#include "mpi_testing.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class MpiMixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    std::string letters, digits;
    for (int i = 0; letters.size() < 12000; i++) letters += std::string(1, 'a' + i * 7 % 26) + (i % 5 ? "" : " ");
    for (int i = 0; digits.size() < 6000; i++) digits += std::string(1, '0' + i * 3 % 10) + (i % 4 ? "" : " ");
    write_file(*dir_ / "letters.txt", letters);
    write_file(*dir_ / "digits.txt", digits);
    for (const char* name : {"letters", "digits"}) {
      auto r = run_ratchet(std::string("shard --tokenizer byte --val-fraction 0 --input ") +
                           (*dir_ / name) + ".txt --output-dir " + (*dir_ / name));
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // 4 rows of 16 tokens per step: B rows per rank.
  static std::string args(int B, const std::string& run_dir, int steps = 10) {
    return "train --model custom --layers 1 --heads 2 --channels 16 --max-seq-len 16 --seq-len 16 "
           "--batch-size " + std::to_string(B) + " --total-batch-tokens 64 --threads 1 --seed 3 "
           "--lr 3e-3 --quiet --steps " + std::to_string(steps) + " --train-data '" +
           (*dir_ / "letters/train_*.h5") + ":0.6' --train-data '" + (*dir_ / "digits/train_*.h5") +
           ":0.4' --run-dir " + run_dir + " --export " + run_dir + "/out.bin";
  }
  inline static TempDir* dir_ = nullptr;
};

}  // namespace

TEST_F(MpiMixture, StoppedOnTwoRanksResumesOnOneDrawingTheSameRows) {
  TempDir ref, run;
  auto r = mpirun_ratchet(2, args(2, ref / "r"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, args(2, run / "r"), "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = run_ratchet(args(2, run / "r"));  // 1 rank, 2 micro-batches of 2 rows
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  const CheckpointMeta a = read_checkpoint_meta(ref / "r/ckpt/step_00000010");
  const CheckpointMeta b = read_checkpoint_meta(run / "r/ckpt/step_00000010");
  EXPECT_EQ(a.cursor.position, 40u);
  ASSERT_EQ(a.cursor.source_rows.size(), 2u);
  EXPECT_EQ(b.cursor, a.cursor);
  EXPECT_GT(a.cursor.source_rows[1], 0u);
  EXPECT_EQ(read_json_file(run / "r/ledger.json")["tokens_by_source"],
            read_json_file(ref / "r/ledger.json")["tokens_by_source"]);
  const std::vector<float> pa = read_export(ref / "r/out.bin"),
                           pb = read_export(run / "r/out.bin");
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_FALSE(pa.empty());
  // Only the order of the gradient sums differs (test_mpi_train.cpp's bound).
  EXPECT_LE(max_abs_diff(pa.data(), pb.data(), pa.size()), 1e-5);
}
