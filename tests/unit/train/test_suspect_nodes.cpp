// The suspect-node file and the exclusion decision (src/train/suspect_nodes.h),
// without Slurm: lines appended and read back, a repeated event not added
// twice, damaged lines named; the plan keeps the user's exclusions, takes
// the most-blamed suspects first and stops at the bound (the partition's
// nodes less the excluded ones must still hold the job), saying so.
#include <gtest/gtest.h>

#include <fstream>

#include "testing/test_util.h"
#include "train/suspect_nodes.h"

namespace ratchet {
namespace {

SuspectNode suspect(const std::string& node, const std::string& cause, int64_t time) {
  SuspectNode s;
  s.node = node;
  s.rank = 1;
  s.cause = cause;
  s.job_id = "42";
  s.time = time;
  s.detail = "seen";
  return s;
}

TEST(SuspectNodes, AppendedLinesReadBackAndARepeatIsNotAdded) {
  testing::TempDir d;
  EXPECT_TRUE(read_suspects(d.path, nullptr).empty());  // no file: none
  EXPECT_TRUE(append_suspect(d.path, suspect("n2", "hang", 100)));
  EXPECT_TRUE(append_suspect(d.path, suspect("n3", "straggler", 200)));
  EXPECT_FALSE(append_suspect(d.path, suspect("n2", "hang", 100)));  // the same hang, read twice
  EXPECT_TRUE(append_suspect(d.path, suspect("n2", "hang", 300)));   // a later one
  const auto s = read_suspects(d.path, nullptr);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].node, "n2");
  EXPECT_EQ(s[0].rank, 1);
  EXPECT_EQ(s[0].job_id, "42");
  EXPECT_EQ(s[1].cause, "straggler");
  EXPECT_EQ(s[2].time, 300);
}

TEST(SuspectNodes, DamagedLinesAreNamedAndLeftOut) {
  testing::TempDir d;
  append_suspect(d.path, suspect("n2", "hang", 100));
  {
    std::ofstream f(suspect_nodes_path(d.path), std::ios::app);
    f << "{\"node\": \"n3\", \"cause\": \"hang\", \"ti\n" << "{\"rank\": 1}\n"
      << "{\"node\": \"n4\", \"rank\": \"one\"}\n";
  }
  std::vector<std::string> damaged;
  const auto s = read_suspects(d.path, &damaged);
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(damaged.size(), 3u);
  EXPECT_NE(damaged[0].find("suspect_nodes.jsonl:2: not a JSON object"), std::string::npos) << damaged[0];
  EXPECT_NE(damaged[1].find(":3: no \"node\""), std::string::npos) << damaged[1];
  EXPECT_NE(damaged[2].find(":4: a field of the wrong type"), std::string::npos) << damaged[2];
}

TEST(SuspectNodes, ExcludesTheSuspectWhenThePartitionHasRoom) {
  const auto p = plan_exclusion({suspect("n2", "hang", 100)}, {}, {"n1", "n2", "n3"}, 2);
  EXPECT_EQ(p.exclude, std::vector<std::string>{"n2"});
  EXPECT_EQ(p.added, std::vector<std::string>{"n2"});
  EXPECT_TRUE(p.left_in.empty());
  EXPECT_EQ(p.message, "");
}

TEST(SuspectNodes, TheBoundKeepsTheJobSchedulableAndSaysSo) {
  // 3 nodes, a 2-node job: one may go. n3 has two incidents, n2 one (newer).
  const std::vector<SuspectNode> s = {suspect("n3", "straggler", 100), suspect("n2", "hang", 300),
                                      suspect("n3", "hang", 200)};
  const auto p = plan_exclusion(s, {}, {"n1", "n2", "n3"}, 2);
  EXPECT_EQ(p.exclude, std::vector<std::string>{"n3"});
  EXPECT_EQ(p.left_in, std::vector<std::string>{"n2"});
  EXPECT_NE(p.message.find("not excluding suspect node(s) n2"), std::string::npos) << p.message;
  EXPECT_NE(p.message.find("the job needs 2"), std::string::npos) << p.message;
  EXPECT_NE(p.message.find("bound is reached"), std::string::npos) << p.message;

  // Equal incidents: the most recent first.
  const auto q = plan_exclusion({suspect("n2", "hang", 100), suspect("n3", "hang", 200)}, {},
                                {"n1", "n2", "n3"}, 2);
  EXPECT_EQ(q.exclude, std::vector<std::string>{"n3"});

  // A one-node partition and a one-node job: nothing can go.
  const auto r = plan_exclusion({suspect("n1", "hang", 100)}, {}, {"n1"}, 1);
  EXPECT_TRUE(r.exclude.empty());
  EXPECT_EQ(r.left_in, std::vector<std::string>{"n1"});
}

TEST(SuspectNodes, TheUsersExclusionsAreKeptAndCountAgainstTheBound) {
  // The user excluded n4 at submission; n2 was excluded by an earlier requeue.
  const std::vector<SuspectNode> s = {suspect("n2", "hang", 100), suspect("n3", "hang", 200)};
  const auto p = plan_exclusion(s, {"n2", "n4"}, {"n1", "n2", "n3", "n4"}, 2);
  EXPECT_EQ(p.exclude, (std::vector<std::string>{"n3", "n4"}));  // n3 newer than n2
  EXPECT_EQ(p.added, std::vector<std::string>{"n3"});
  EXPECT_EQ(p.left_in, std::vector<std::string>{"n2"});
  // Accumulated: with room, every earlier suspect stays excluded.
  const auto q = plan_exclusion(s, {"n2"}, {"n1", "n2", "n3", "n4", "n5"}, 2);
  EXPECT_EQ(q.exclude, (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(q.added, std::vector<std::string>{"n3"});
}

TEST(SuspectNodes, UnknownPartitionExcludesNoSuspect) {
  const auto p = plan_exclusion({suspect("n2", "hang", 100)}, {"n9"}, {}, 1);
  EXPECT_EQ(p.exclude, std::vector<std::string>{"n9"});
  EXPECT_EQ(p.left_in, std::vector<std::string>{"n2"});
  EXPECT_NE(p.message.find("partition's nodes are unknown"), std::string::npos) << p.message;
}

TEST(SuspectNodes, ASuspectOutsideThePartitionCostsNothing) {
  const auto p = plan_exclusion({suspect("x1", "hang", 100)}, {}, {"n1"}, 1);
  EXPECT_EQ(p.exclude, std::vector<std::string>{"x1"});
  EXPECT_TRUE(p.left_in.empty());
}

}  // namespace
}  // namespace ratchet
