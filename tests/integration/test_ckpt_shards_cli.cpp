// `ratchet ckpt inspect|verify|export` on format-3 (sharded) checkpoints,
// through the binary: what inspect lists, and that verify and export hold
// bounded memory (verify: a 4 MB block at a time; export: the parameters
// only, never the moments), measured as each process's peak RSS above that
// of `ckpt inspect` (the same binary reading no tensor), on a 7.25M-parameter
// model whose checkpoint is 87 MB.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class CkptShardsCli : public BibleShardsSuite {};

// Peak RSS in MB of `ratchet ARGS` (GNU time's %M, KB), with its exit code.
double peak_rss_mb(const TempDir& d, const std::string& args, int* exit_code) {
  auto r = run_shell("/usr/bin/time -f %M -o " + (d / "rss") + " " RATCHET_EXE " " + args);
  *exit_code = r.exit_code;
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return std::stod(read_file(d / "rss")) / 1024.0;
}

TEST_F(CkptShardsCli, InspectListsTheShardsAndVerifyAndExportStayBounded) {
  TempDir d;
  const std::string ck = d / "ck";
  auto r = run_ratchet("train --model custom --layers 4 --heads 6 --channels 384 --max-seq-len 16 "
                       "--seq-len 16 --batch-size 2 --threads 1 --train-data '" +
                       (*dir_ / "data/train_*.h5") + "' --steps 1 --quiet --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string step = ck + "/step_00000001";
  const double shard_mb = fs::file_size(step + "/shard_00000.h5") / 1e6 / 1.048576;
  ASSERT_GT(shard_mb, 80.0);  // P = 7.25M: 3 x 29 MB of tensors

  r = run_ratchet("ckpt inspect " + step);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("shards           1 (format 3, 87.0 MB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shard_00000.h5   rank 0     1 range(s), 7"), std::string::npos)
      << r.output;

  int rc = 0;
  const double base = peak_rss_mb(d, "ckpt inspect " + step, &rc);
  const double verify = peak_rss_mb(d, "ckpt verify " + step, &rc);
  const double out = peak_rss_mb(d, "ckpt export " + step + " --output " + (d / "w.bin"), &rc);
  const double params_mb = shard_mb / 3;
  std::printf("[ rss ] inspect %.1f MB, verify %.1f MB, export %.1f MB; checkpoint %.1f MB, "
              "parameters %.1f MB\n", base, verify, out, shard_mb, params_mb);
  // verify: one 4 MB block (plus HDF5's chunk of the same size): 24 MB of
  // slack for allocator and sanitizer overheads, far below the 87 MB it reads.
  EXPECT_LT(verify - base, 24.0);
  // export: the parameters (29 MB) and the llm.c file's write, never the
  // moments (58 MB more): the same slack.
  EXPECT_LT(out - base, params_mb + 24.0);
  EXPECT_GT(fs::file_size(d / "w.bin"), 7000000u * 4);
}

}  // namespace
