// Which rank died (src/report/dead_rank.h): from the ranks' fatal records
// and srun's messages of the failed step. The first task srun reports dead
// of a signal before it ends the step itself is blamed; a task that exited
// with an error, an MPI/NCCL error (a survivor's view) or an assertion is
// not; records older than the step are another attempt's.
#include <gtest/gtest.h>

#include "report/dead_rank.h"

namespace ratchet {
namespace {

FatalRecord rec(int rank, const std::string& host, const std::string& cause,
                const std::string& lib, const std::string& what, int64_t time) {
  FatalRecord r;
  r.rank = rank;
  r.host = host;
  r.cause = cause;
  r.lib = lib;
  r.what = what;
  r.time = time;
  return r;
}

// What srun printed when rank 1 was SIGKILLed on the namespace cluster
// (slurm 22.05, --kill-on-bad-exit=1), its peer then ended by srun.
const char* kKilled =
    "srun: error: rnode2: task 1: Killed\n"
    "srun: launch/slurm: _step_signal: Terminating StepId=145.0\n"
    "slurmstepd-rnode1: error: *** STEP 145.0 ON rnode1 CANCELLED AT 2026-11-29T17:20:58 ***\n"
    "srun: error: rnode1: task 0: Terminated\n"
    "srun: Force Terminated StepId=145.0\n";

TEST(DeadRank, SrunsFirstTaskKilledByASignalIsBlamed) {
  const DeadRank d = find_dead_rank({}, 0, kKilled);
  ASSERT_TRUE(d.found) << d.why_not;
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.host, "rnode2");
  EXPECT_NE(d.detail.find("SIGKILL"), std::string::npos) << d.detail;
  const DeadRank s = find_dead_rank({}, 0, "srun: error: n3: task 2: Segmentation fault (core dumped)\n");
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.host, "n3");
  EXPECT_EQ(s.rank, 2);
  const DeadRank o = find_dead_rank({}, 0, "srun: error: n4: tasks 4-5: Out Of Memory\n");
  ASSERT_TRUE(o.found);
  EXPECT_EQ(o.rank, 4);
}

TEST(DeadRank, AnErrorExitIsNotADeathAndKillsAfterTheStepsEndAreSrunsOwn) {
  // A rank failed with an error (every rank would, on a bad flag); the other
  // was killed after KillWait by srun: neither is a node's fault.
  const DeadRank d = find_dead_rank({}, 0,
                                    "srun: error: rnode1: task 0: Exited with exit code 2\n"
                                    "srun: launch/slurm: _step_signal: Terminating StepId=3.0\n"
                                    "srun: error: rnode2: task 1: Killed\n");
  EXPECT_FALSE(d.found);
  EXPECT_NE(d.why_not.find("exit code 2"), std::string::npos) << d.why_not;
  // A survivor's MPI abort reported before the dead rank: the death is still found.
  const DeadRank e = find_dead_rank({}, 0,
                                    "srun: error: rnode1: task 0: Exited with exit code 1\n"
                                    "srun: error: rnode2: task 1: Killed\n");
  ASSERT_TRUE(e.found);
  EXPECT_EQ(e.host, "rnode2");
  EXPECT_FALSE(find_dead_rank({}, 0, "").found);
}

TEST(DeadRank, AFatalRecordOfThisAttemptWinsOverSrunsMessages) {
  // Rank 2 died of a CUDA error (its record) and exited through MPI_Abort;
  // rank 0 saw the MPI error of a dead peer: only the device error blames.
  const std::vector<FatalRecord> r = {
      rec(0, "n1", "library", "mpi", "connection reset", 1005),
      rec(2, "n3", "library", "cuda", "an illegal memory access", 1004),
      rec(1, "n2", "signal", "", "SIGSEGV", 900)};  // an older attempt's
  const DeadRank d = find_dead_rank(r, 1000, "srun: error: n1: task 0: Exited with exit code 1\n");
  ASSERT_TRUE(d.found) << d.why_not;
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.host, "n3");
  EXPECT_EQ(d.time, 1004);
  EXPECT_NE(d.detail.find("cuda error"), std::string::npos) << d.detail;
  // The older attempt's SIGSEGV counts when the step is older than it.
  const DeadRank old = find_dead_rank(r, 800, "");
  ASSERT_TRUE(old.found);
  EXPECT_EQ(old.rank, 1);
}

TEST(DeadRank, MpiNcclAndAssertionErrorsBlameNoNode) {
  const std::vector<FatalRecord> r = {rec(0, "n1", "library", "mpi", "x", 10),
                                      rec(1, "n2", "library", "nccl", "x", 10),
                                      rec(1, "n2", "library", "assert", "x", 11)};
  const DeadRank d = find_dead_rank(r, 0, "");
  EXPECT_FALSE(d.found);
  EXPECT_NE(d.why_not.find("does not blame its node"), std::string::npos) << d.why_not;
}

}  // namespace
}  // namespace ratchet
