// Checkpoints written by an older build still resume, bit for bit.
//
// tests/data/ckpt_compat/ holds, for each configuration (cpu and simt BF16;
// ZeRO 0 on 1 rank, ZeRO 1-3 on 2 ranks), a checkpoint that an OLDER build
// (ORIGIN names it: the code before issue 35's restructuring of the ZeRO
// stages) wrote when SIGUSR1 stopped its run at step 7, and that build's
// export of the same run never stopped. This build resumes the checkpoint and
// must end byte-identical to that export: the on-disk format, the sharded
// optimizer state and the numerics of every stage unchanged across the change.
// Bytes are compared on the machine the fixtures were made on (MACHINE, as
// machine.sh prints it: -march=native's target and OpenBLAS's kernels decide
// the bits). Elsewhere the export's header must be identical and every weight
// within kOtherMachine of the older run's: an AMD EPYC (znver3 target,
// Haswell kernels) ends every configuration at most 3.9e-7 from the bytes
// the fixtures' machine wrote, while resuming cpu-zero0 with --lr 2.9e-3
// instead of 3e-3 (a 3% smaller update for the 5 resumed steps) ends 1.4e-4
// from them; a lost moment or step count moves more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "mpi_testing.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(RATCHET_TESTS_DIR) + "/data/ckpt_compat";
constexpr double kOtherMachine = 1e-5;
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);  // the export's llm.c header

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The largest |a - b| over the FP32 weights after the header (infinite when
// the sizes differ).
double max_weight_diff(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || a.size() < kHeaderBytes) return INFINITY;
  double worst = 0;
  for (size_t i = kHeaderBytes; i + sizeof(float) <= a.size(); i += sizeof(float)) {
    float x, y;
    std::memcpy(&x, a.data() + i, sizeof x);
    std::memcpy(&y, b.data() + i, sizeof y);
    const double d = std::fabs((double)x - y);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

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
  const std::string got = read_file(d / "out.bin"), want = read_file(fx + "/ref.bin");
  const std::string made_on = first_line(read_file(kFixtures + "/MACHINE"));
  const std::string here = first_line(run_shell(kFixtures + "/machine.sh").output);
  if (!made_on.empty() && made_on == here) {
    EXPECT_TRUE(got == want) << name << ": the resumed weights differ from the older build's straight run";
    return;
  }
  const double diff = max_weight_diff(got, want);
  std::printf("[ %s ] fixtures made on '%s', this machine '%s': header bytes, and weights within "
              "%g (largest difference %.3g)\n", name.c_str(),
              made_on.empty() ? "(not recorded)" : made_on.c_str(), here.c_str(), kOtherMachine, diff);
  ASSERT_EQ(got.size(), want.size()) << name;
  EXPECT_EQ(got.substr(0, kHeaderBytes), want.substr(0, kHeaderBytes)) << name << ": the export's header";
  EXPECT_LE(diff, kOtherMachine)
      << name << ": the resumed weights are further from the older build's straight run than "
                 "another machine's rounding";
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
