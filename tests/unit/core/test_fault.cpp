// core/fault.h: the "SIG@point*N" items (only the N-th time the point is
// reached), which scripts/chaos.sh uses to freeze a rank inside the K-th
// gather or save of an attempt. $RATCHET_FAULT is read once per process, so
// each case runs in a forked child that sets it first.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "core/fault.h"

namespace ratchet {
namespace {

volatile sig_atomic_t g_hits = 0;
volatile sig_atomic_t g_first_hit_call = 0;
volatile sig_atomic_t g_call = 0;
void on_usr2(int) {
  if (g_hits++ == 0) g_first_hit_call = g_call;
}

// Runs fault_point("p") `calls` times in a child with RATCHET_FAULT=spec; the
// child exits with 10 * (the call that first raised USR2) + (USR2s raised).
int usr2_calls(const char* spec, int calls) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("RATCHET_FAULT", spec, 1);
    signal(SIGUSR2, on_usr2);
    for (int i = 1; i <= calls; i++) {
      g_call = i;
      fault_point("p");
      fault_point("other");
    }
    _exit(10 * g_first_hit_call + g_hits);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Fault, SignalEveryTimeWithoutCount) {
  EXPECT_EQ(usr2_calls("USR2@p", 3), 10 * 1 + 3);
}

TEST(Fault, SignalOnlyTheNthTime) {
  EXPECT_EQ(usr2_calls("USR2@p*2", 4), 10 * 2 + 1);
  EXPECT_EQ(usr2_calls("USR2@p*4", 4), 10 * 4 + 1);
  EXPECT_EQ(usr2_calls("USR2@p*5", 4), 0);  // never reached that often: nothing
  EXPECT_EQ(usr2_calls("USR2@other*3", 4), 10 * 3 + 1);  // each point counts its own calls
}

TEST(Fault, RankPrefixAndCount) {
  // Rank 0 without a launcher: "rank1/" is not this process.
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("PMIX_RANK");
  unsetenv("SLURM_PROCID");
  EXPECT_EQ(usr2_calls("rank1/USR2@p*2", 3), 0);
  EXPECT_EQ(usr2_calls("rank0/USR2@p*2", 3), 10 * 2 + 1);
}

TEST(Fault, StopTheNthTime) {
  // STOP@p*2: the child runs past the first call and freezes in the second.
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("RATCHET_FAULT", "STOP@p*2", 1);
    fault_point("p");
    fault_point("p");
    _exit(7);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  EXPECT_TRUE(WIFSTOPPED(status));
  kill(pid, SIGCONT);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

}  // namespace
}  // namespace ratchet
