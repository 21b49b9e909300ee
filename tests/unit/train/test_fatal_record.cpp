// The fatal record (src/train/fatal_record.h): a process that dies of a
// signal it can catch, or of a failed library call (check_failed), leaves
// RUN_DIR/flight/fatal_rank_R.json naming itself and the cause, and still
// dies of its signal. Each case runs in a forked child, which really dies.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <ctime>
#include <fstream>

#include "core/error.h"
#include "testing/test_util.h"
#include "train/fatal_record.h"

namespace ratchet {
namespace {

// Forks; the child installs the record and runs `die`; returns its wait status.
template <typename F>
int child_status(const std::string& dir, int rank, F die) {
  const pid_t pid = fork();
  if (pid == 0) {
    install_fatal_record(dir, rank, "nodeX", "42");
    die();
    _exit(0);  // not reached when `die` kills
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(FatalRecord, ASegfaultIsRecordedAndTheProcessStillDiesOfIt) {
  testing::TempDir d;
  const int64_t before = (int64_t)std::time(nullptr);
#if defined(__SANITIZE_ADDRESS__)
  // ASan handles SIGSEGV itself (installed before ours, so restored and
  // re-raised to: it writes a report, which the sanitizer step counts as a
  // failure, and exits instead of dying of the signal). SIGILL, another of
  // the handled signals, is left to the default by ASan.
  const int sig = SIGILL;
  const char* name = "SIGILL";
#else
  const int sig = SIGSEGV;
  const char* name = "SIGSEGV";
#endif
  const int st = child_status(d.path, 1, [sig] { raise(sig); });
  ASSERT_TRUE(WIFSIGNALED(st)) << "status " << st;
  EXPECT_EQ(WTERMSIG(st), sig);
  std::vector<std::string> damaged;
  const auto r = read_fatal_records(d.path, &damaged);
  EXPECT_TRUE(damaged.empty());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].rank, 1);
  EXPECT_EQ(r[0].host, "nodeX");
  EXPECT_EQ(r[0].job_id, "42");
  EXPECT_EQ(r[0].cause, "signal");
  EXPECT_EQ(r[0].what, name);
  EXPECT_GE(r[0].time, before);
  EXPECT_LE(r[0].time, (int64_t)std::time(nullptr));
}

TEST(FatalRecord, AFailedLibraryCallIsRecordedOnceNotOverwrittenByItsAbort) {
  testing::TempDir d;
  const int st = child_status(d.path, 3, [] {
    check_failed("cuda", "cudaMemcpy(...)", "an illegal memory access was encountered", "f",
                 "file.cu", 1);
  });
  ASSERT_TRUE(WIFSIGNALED(st));
  EXPECT_EQ(WTERMSIG(st), SIGABRT);  // check_failed aborts: the handler saw SIGABRT too
  const auto r = read_fatal_records(d.path, nullptr);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].rank, 3);
  EXPECT_EQ(r[0].cause, "library");
  EXPECT_EQ(r[0].lib, "cuda");
  EXPECT_EQ(r[0].what, "an illegal memory access was encountered");
}

TEST(FatalRecord, ANormalEndWritesNothingAndAStaleRecordIsRemovedAtInstall) {
  testing::TempDir d;
  { std::ofstream(fatal_record_path(d.path, 0)) << "{\"rank\": 0, \"cause\": \"signal\"}\n"; }
  const int st = child_status(d.path, 0, [] {});
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_TRUE(read_fatal_records(d.path, nullptr).empty());
}

TEST(FatalRecord, ADamagedRecordIsNamed) {
  testing::TempDir d;
  { std::ofstream(fatal_record_path(d.path, 2)) << "{\"rank\": 2, \"cau"; }
  std::vector<std::string> damaged;
  EXPECT_TRUE(read_fatal_records(d.path, &damaged).empty());
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_NE(damaged[0].find("fatal_rank_2.json"), std::string::npos);
}

}  // namespace
}  // namespace ratchet
