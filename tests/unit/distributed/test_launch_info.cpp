// detect_launch_from and slurm_tasks_on_node (src/distributed/communicator.h):
// rank, world and local rank from the launcher's variables, as pure
// functions of a fake environment (no MPI, no Slurm).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "distributed/communicator.h"
#include "testing/expect_error.h"

namespace ratchet {
namespace {

// The environment detect_launch_from() reads, set per test.
std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
LaunchInfo launch(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return detect_launch_from(fake_getenv);
}

TEST(LaunchInfo, NothingSetIsOneProcess) {
  const LaunchInfo li = launch({});
  EXPECT_EQ(li.rank, 0);
  EXPECT_EQ(li.world, 1);
  EXPECT_EQ(li.local_rank, 0);
  EXPECT_EQ(li.local_world, 1);
  EXPECT_EQ(li.source, "none");
}

TEST(LaunchInfo, MpirunWinsOverSlurmInsideAJob) {
  // mpirun inside a Slurm allocation: every rank sees SLURM_PROCID=0.
  const LaunchInfo li = launch({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(li.rank, 3);
  EXPECT_EQ(li.world, 4);
  EXPECT_EQ(li.local_rank, 1);
  EXPECT_EQ(li.local_world, 2);
  EXPECT_NE(li.source.find("mpirun"), std::string::npos) << li.source;
  // Without the local variables: one node, local = global.
  const LaunchInfo bare = launch({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}});
  EXPECT_EQ(bare.local_rank, 2);
  EXPECT_EQ(bare.local_world, 3);
}

TEST(LaunchInfo, SrunWithPmixTakesTheRestFromSlurm) {
  const LaunchInfo li = launch({{"PMIX_RANK", "5"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"},
                                {"SLURM_LOCALID", "2"}, {"SLURM_NODEID", "1"},
                                {"SLURM_STEP_TASKS_PER_NODE", "3(x2)"}});
  EXPECT_EQ(li.rank, 5);
  EXPECT_EQ(li.world, 6);
  EXPECT_EQ(li.local_rank, 2);
  EXPECT_EQ(li.local_world, 3);
  EXPECT_NE(li.source.find("PMIx"), std::string::npos) << li.source;
  // srun -n 1 inside an N-task job: the step's task count wins.
  EXPECT_EQ(launch({{"PMIX_RANK", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                    {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}})
                .world,
            1);
}

TEST(LaunchInfo, PlainSrunIsAStepAndABatchShellIsNot) {
  const LaunchInfo step = launch({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                                  {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "3"},
                                  {"SLURM_TASKS_PER_NODE", "2"}});
  EXPECT_EQ(step.rank, 1);
  EXPECT_EQ(step.world, 2);
  EXPECT_EQ(step.local_rank, 1);
  EXPECT_EQ(step.local_world, 2);
  EXPECT_NE(step.source.find("Slurm (SLURM_PROCID)"), std::string::npos) << step.source;
  // The batch shell of a 2-task job sees SLURM_PROCID and SLURM_NTASKS but
  // no step id: it is one process, not rank 0 of 2.
  const LaunchInfo shell = launch({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                   {"SLURM_LOCALID", "0"}, {"SLURM_TASKS_PER_NODE", "2"}});
  EXPECT_EQ(shell.world, 1);
  EXPECT_EQ(shell.rank, 0);
  EXPECT_NE(shell.source.find("batch shell"), std::string::npos) << shell.source;
}

TEST(LaunchInfo, InconsistentVariablesAreAnErrorNamingTheLauncher) {
  testing::expect_error(
      [] { launch({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}}); },
      {"inconsistent", "Slurm (SLURM_PROCID)", "rank 2 of world 2"});
  testing::expect_error([] { launch({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}}); },
                        {"mpirun", "rank 0 of world 0"});
  // A value that is not a number counts as unset.
  EXPECT_EQ(launch({{"OMPI_COMM_WORLD_RANK", "1x"}}).source, "none");
}

TEST(LaunchInfo, OutOfRangeLocalValuesFallBack) {
  const LaunchInfo li = launch({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "5"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}});
  EXPECT_EQ(li.local_world, 1);
  EXPECT_EQ(li.local_rank, 0);
}

TEST(SlurmTasksOnNode, ParsesRepeatsAndLists) {
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), -1);  // past the last node
  for (const char* bad : {"", "x", "2(3)", "2(x3", "2(x)"})
    EXPECT_EQ(slurm_tasks_on_node(bad, 0), -1) << bad;
}

}  // namespace
}  // namespace ratchet
