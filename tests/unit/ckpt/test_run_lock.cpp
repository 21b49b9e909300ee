// The run lock (ckpt/run_lock.h) between a trainer and `ckpt prune`, in one
// process: flock(2) locks belong to open file descriptions, so two RunLocks
// on one directory conflict here exactly as two processes would.
#include "ckpt/run_lock.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/error.h"

namespace {

std::string fresh_dir(const char* name) {
  const auto d = std::filesystem::temp_directory_path() /
                 (std::string("ratchet_run_lock_") + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// A trainer restarted (e.g. requeued by Slurm) while an operator's prune
// holds the directory waits for the prune instead of failing the job.
TEST(RunLock, TrainerWaitsForAPruneToFinish) {
  const std::string dir = fresh_dir("wait");
  auto prune = std::make_unique<ratchet::RunLock>(dir, "ckpt prune", "DIR");
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    prune.reset();
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ratchet::RunLock> train;
  EXPECT_NO_THROW(train = std::make_unique<ratchet::RunLock>(dir, "train", "--ckpt-dir"));
  release.join();
  EXPECT_GE(seconds_since(t0), 0.3);  // it did wait for the prune's release
  std::filesystem::remove_all(dir);
}

// `ckpt prune` removes a lock file it made (issue 25: it left ratchet.lock in
// any directory). A trainer waiting on that file wins a flock on a file no
// longer in the directory: it must start again on the path, or a third
// process would lock a new file there and two would hold the directory.
TEST(RunLock, ARemovedLockFileLetsNoSecondHolderIn) {
  const std::string dir = fresh_dir("removed");
  const std::string path = dir + "/ratchet.lock";
  auto prune = std::make_unique<ratchet::RunLock>(dir, "ckpt prune", "DIR", /*remove_created=*/true);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    prune.reset();
  });
  std::unique_ptr<ratchet::RunLock> train;
  EXPECT_NO_THROW(train = std::make_unique<ratchet::RunLock>(dir, "train", "--ckpt-dir"));
  release.join();
  ASSERT_TRUE(std::filesystem::exists(path));  // made anew by the trainer
  EXPECT_THROW(ratchet::RunLock(dir, "train", "--ckpt-dir"), ratchet::Error);
  train.reset();
  EXPECT_TRUE(std::filesystem::exists(path));  // a trainer's file stays (empty)
  { ratchet::RunLock again(dir, "ckpt prune", "DIR", true); }
  EXPECT_TRUE(std::filesystem::exists(path));  // prune did not make this one
  std::filesystem::remove(path);
  { ratchet::RunLock own(dir, "ckpt prune", "DIR", true); }
  EXPECT_FALSE(std::filesystem::exists(path));  // ... but this one
  std::filesystem::remove_all(dir);
}

// A second trainer is refused at once, naming the holder.
TEST(RunLock, SecondTrainerIsRefusedAtOnce) {
  const std::string dir = fresh_dir("second");
  ratchet::RunLock first(dir, "train", "--ckpt-dir");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ratchet::RunLock second(dir, "train", "--ckpt-dir");
    ADD_FAILURE() << "a second trainer took the lock";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is in use by pid " + std::to_string(getpid())),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(seconds_since(t0), 5.0);  // refused, not waited on (staleness is 60 s)
  std::filesystem::remove_all(dir);
}

// A directory where the lock file belongs is named as such (it was "must be a
// directory you can write", about the run directory that is fine).
TEST(RunLock, ALockFileThatIsADirectoryIsNamed) {
  const std::string dir = fresh_dir("isdir");
  std::filesystem::create_directory(dir + "/ratchet.lock");
  try {
    ratchet::RunLock lock(dir, "train", "--run-dir");
    ADD_FAILURE() << "locked through a directory";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/ratchet.lock is a directory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rmdir"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// --run-dir and --ckpt-dir naming one directory: locked once (before, the
// second lock refused the process itself, "in use by pid <its own>"); another
// trainer is still refused.
TEST(RunLock, RunDirAndCkptDirTheSameAreLockedOnce) {
  const std::string dir = fresh_dir("same");
  std::vector<std::unique_ptr<ratchet::RunLock>> locks;
  ASSERT_NO_THROW(locks = ratchet::lock_run_dirs(dir, dir + "/."));
  EXPECT_EQ(locks.size(), 1u);
  EXPECT_THROW(ratchet::lock_run_dirs(dir, ""), ratchet::Error);
  locks.clear();
  EXPECT_EQ(ratchet::lock_run_dirs(dir, dir + "/ckpt").size(), 2u);  // distinct: both
  std::filesystem::remove_all(dir);
}

// A prune that holds on past the staleness: the trainer gives up and is
// refused naming it, rather than waiting forever.
TEST(RunLock, TrainerWaitForAPruneIsBounded) {
  const std::string dir = fresh_dir("bounded");
  setenv("RATCHET_LOCK_STALE_SECONDS", "0.5", 1);
  ratchet::RunLock prune(dir, "ckpt prune", "DIR");
  try {
    ratchet::RunLock train(dir, "train", "--ckpt-dir");
    ADD_FAILURE() << "the trainer took a lock a prune still holds";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt prune"), std::string::npos) << e.what();
  }
  unsetenv("RATCHET_LOCK_STALE_SECONDS");
  std::filesystem::remove_all(dir);
}

// A prune never waits for a trainer: it is refused at once.
TEST(RunLock, PruneIsRefusedWhileATrainerHoldsTheDirectory) {
  const std::string dir = fresh_dir("prune");
  ratchet::RunLock train(dir, "train", "--ckpt-dir");
  EXPECT_THROW(ratchet::RunLock(dir, "ckpt prune", "DIR"), ratchet::Error);
  std::filesystem::remove_all(dir);
}
