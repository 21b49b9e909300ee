// Checkpoints written by an older build still resume, bit for bit.
//
// tests/data/ckpt_compat/ holds, for each configuration (cpu and simt BF16;
// ZeRO 0 on 1 rank, ZeRO 1-3 on 2 ranks), a checkpoint that an OLDER build
// (ORIGIN names it: the code before issue 35's restructuring of the ZeRO
// stages) wrote when SIGUSR1 stopped its run at step 7, and that build's
// export of the same run never stopped. This build resumes the checkpoint and
// must end byte-identical to that export: the on-disk format, the sharded
// optimizer state and the numerics of every stage unchanged across the change.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mpi_testing.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(RATCHET_TESTS_DIR) + "/data/ckpt_compat";

class CkptCompat : public ::testing::TestWithParam<std::string> {};

TEST_P(CkptCompat, OlderCheckpointResumesToTheOlderStraightRunsWeights) {
  const std::string name = GetParam();
  const std::string fx = kFixtures + "/" + name;
  std::ifstream cmd_file(fx + "/cmd");
  int ranks = 0;
  std::string program, args;
  cmd_file >> ranks >> program;
  std::getline(cmd_file, args);
  ASSERT_GT(ranks, 0) << fx << "/cmd";
  std::string exe = RATCHET_EXE;
  if (program == "ratchet-simt") {
#ifdef RATCHET_SIMT_EXE
    exe = RATCHET_SIMT_EXE;
#else
    GTEST_SKIP() << "this build has no ratchet-simt (CUDA headers missing)";
#endif
  }
  TempDir d;
  // The checkpoint is resumed in place (a resume writes its ledger and lock
  // there): a copy, so the fixture stays what the older build wrote.
  fs::copy(kFixtures + "/data", d / "data", fs::copy_options::recursive);
  fs::copy(fx + "/ck", d / "ck", fs::copy_options::recursive);
  // set -f: the globs in cmd reach ratchet unexpanded, as the fixture run had them.
  RunResult r = run_shell("set -f; cd " + std::string(d.path) + " && " + mpirun_prefix(ranks) + exe + args +
                          " --ckpt-dir ck --export out.bin");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 7"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == read_file(fx + "/ref.bin"))
      << name << ": the resumed weights differ from the older build's straight run";
}

INSTANTIATE_TEST_SUITE_P(Configs, CkptCompat,
                         ::testing::Values("cpu-zero0", "cpu-zero1", "cpu-zero2", "cpu-zero3",
                                           "simt-zero1", "simt-zero2", "simt-zero3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
