// `ratchet sweep` against the faults of issue 25, through the real binary and
// the fake trainer (sweep_fake_trainer.sh): a trainer killed by hand, a run
// lock held by a trainer the controller did not start, faults every trial
// shares (missing shards, a full disk, the same failure again and again),
// per-trial budgets, a vanished trial directory, the "saved" estimate.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/sweep_fake.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int count_events(const std::string& dir, const std::string& ev) {
  int n = 0;
  for (const auto& e : journal(dir)) n += e["event"] == ev;
  return n;
}

json status(const std::string& dir) {
  return json::parse(run_ratchet("sweep status " + dir + " --json").output);
}

// A sweep over the fake trainer: R = 9, inputs that exist (absolute paths).
void init_fake(const TempDir& d, const std::string& dir, const std::string& space = kSpace9) {
  fs::create_directories(d / "data");
  write_file(d / "data/train_0.h5", "");
  write_file(d / "data/val_0.h5", "");
  write_file(d / "base.ini", "train-data = " + (d / "data/train_*.h5") + "\nval-data = " +
                                 (d / "data/val_*.h5") + "\nsteps = 9\n");
  write_file(d / "space.ini", space);
  auto r = run_ratchet("sweep init " + dir + " --space " + (d / "space.ini") + " --base " +
                       (d / "base.ini") + " --grid --grid-in-order");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

std::string fake_run(const std::string& dir, const std::string& flags = "",
                     const std::string& trainer = kFakeTrainer) {
  return "sweep run " + dir + " --trainer '" + trainer + "' --poll-seconds 0.01 " + flags;
}

// The pid `sweep run` printed for a trial's launch, read from its output
// file while it runs (0 after `seconds` without one).
long printed_pid(const std::string& log, int trial, double seconds) {
  const std::string key = "trial " + std::to_string(trial) + " -> ";
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find(key);
      const auto local = line.find("local ");
      if (at != std::string::npos && local != std::string::npos)
        return std::atol(line.c_str() + local + 6);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

// The printed pid is the trainer's own (no `sh -c` between). A trainer that
// outlives its parent and holds the
// trial's run lock (here: the fake's `sleep`, which keeps the lock's file
// descriptor) is waited for, not met by a second trainer that fails on the
// lock: the trial is not lost and the sweep ends with it. Before, the printed
// pid was the wrapper shell's, the relaunch exited 2 on the lock held by the
// orphan, and the trial was failed for good.
TEST(SweepFaults, TheTrainerIsTrackedAndALiveOneIsNeverStartedTwice) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(3e-3, 1e-2)\n");
  const std::string log = d / "controller.log";
  auto r = run_shell("FAKE_SLEEP=2 " RATCHET_EXE " " + fake_run(dir, "--scheduler none --parallel 1") +
                     " > " + log + " 2>&1 & echo $!");
  const long pid = printed_pid(log, 0, 10);
  ASSERT_GT(pid, 0) << read_file(log);
  // The pid is printed right after fork(), so the child may not have exec'd
  // yet (its cmdline is still the controller's, or empty while execve swaps
  // the image): read it until it is a trainer's, for at most 5 s. A wrapper
  // shell's pid would never show the fake trainer as its script.
  std::string cmdline;
  std::vector<std::string> args;
  for (int i = 0; i < 250; ++i) {
    cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    args.clear();
    std::stringstream ss(cmdline);
    for (std::string a; std::getline(ss, a, '\0');) args.push_back(a);
    if (args.size() >= 2 && args[1].find("sweep_fake_trainer.sh") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(args.size(), 2u) << cmdline;
  EXPECT_EQ(args[0], "bash") << "the printed pid is not the trainer's";
  EXPECT_NE(args[1].find("sweep_fake_trainer.sh"), std::string::npos) << args[1];
  // Once it holds its run lock (it logged its invocation), killed outright:
  // its `sleep` lives on with the lock, as an orphaned trainer would.
  ASSERT_EQ(run_shell("for i in $(seq 400); do [ -s " + dir + "/trials/t0000/invocations ] && exit 0; "
                      "sleep 0.05; done; exit 1").exit_code, 0);
  ASSERT_EQ(run_shell("kill -KILL " + std::to_string(pid)).exit_code, 0);
  // The controller ends on its own (each trial sleeps 2 s; the orphan 2 s).
  auto w = run_shell("for i in $(seq 600); do grep -q 'done:' " + log + " && exit 0; sleep 0.1; done; exit 1");
  ASSERT_EQ(w.exit_code, 0) << read_file(log);
  run_shell("sleep 0.3");
  const std::string out = read_file(log);
  EXPECT_NE(out.find("is held by a live trainer"), std::string::npos) << out;
  EXPECT_EQ(count_events(dir, "failed"), 0) << out;
  const json j = status(dir);
  EXPECT_EQ(j["best_trial"]["id"], 0) << out;  // lr 3e-3: the best, not lost
  EXPECT_EQ(j["trials"][0]["state"], "done");
  // Killed once (no exit code: lost), then run again after the orphan let go.
  EXPECT_EQ(invocations(dir, 0), "9\n9\n");
}

// A segment that ended while no controller watched it and left no exit code
// (a trainer of an older ratchet, or one whose exit file was lost) but did
// reach its rung: its result is taken, not trained again.
TEST(SweepFaults, ASegmentThatFinishedUnwatchedIsAdopted) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(3e-3)\n");
  // killed right after journaling the launch; the segment runs on for 1 s
  auto r = run_shell("FAKE_SLEEP=1 RATCHET_FAULT='sweep-journal*2' " RATCHET_EXE " " +
                     fake_run(dir, "--quiet --scheduler none"));
  ASSERT_NE(r.exit_code, 0) << r.output;
  // (--scheduler none: the segment of rung index 2, R) The trainer publishes
  // its exit file about 1 s on; a loaded machine gets 30 s.
  run_shell("for i in $(seq 300); do [ -e " + dir + "/trials/t0000/seg-r2-a0.exit ] && exit 0; sleep 0.1; done");
  ASSERT_TRUE(fs::exists(dir + "/trials/t0000/seg-r2-a0.exit"));  // the trainer published it
  fs::remove(dir + "/trials/t0000/seg-r2-a0.exit");
  r = run_ratchet(fake_run(dir, "--scheduler none"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("finished 9 steps on its own: taking its result"), std::string::npos) << r.output;
  EXPECT_EQ(invocations(dir, 0), "9\n");
  EXPECT_EQ(status(dir)["best_trial"]["id"], 0);
}

// A trainer stand-in that fails in a planted way once a file exists, else
// runs the fake trainer.
std::string faulty_trainer(const TempDir& d, const std::string& name, const std::string& when,
                           const std::string& failure) {
  write_file(d / name, "if " + when + "; then " + failure + "; fi\nexec " + kFakeTrainer + " \"$@\"\n");
  return "bash " + (d / name);
}

// Shards moved away mid-sweep: the trial that meets it is not failed, the
// controller stops (exit 1) naming the missing input, and once the shards are
// back a rerun finishes every trial. Before, every remaining trial failed in
// seconds and the sweep ended with exit 0 and a best at rung 0; the rerun
// said "already ended".
TEST(SweepFaults, MissingShardsStopTheSweepWithoutFailingTrials) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(1e-3, 3e-3, 1e-2, 2e-3)\n");
  // The third invocation moves the shards away and fails as the trainer would.
  write_file(d / "count", "");
  const std::string trainer = faulty_trainer(
      d, "moving.sh", "echo x >> " + (d / "count") + "; [ $(wc -l < " + (d / "count") + ") -eq 3 ]",
      "mv " + (d / "data") + " " + (d / "moved") + "; echo 'ratchet train: error: --train-data: no "
      "file matches'; exit 2");
  auto r = run_ratchet(fake_run(dir, "--scheduler none --quiet", trainer));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("stopped on a fault every trial shares: train-data '" + (d / "data/train_*.h5") +
                          "' of " + dir + "/base.ini matches no file"), std::string::npos) << r.output;
  EXPECT_EQ(count_events(dir, "failed"), 0);
  // Still missing: refused at once, nothing started.
  r = run_ratchet(fake_run(dir, "--scheduler none --quiet", trainer));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("matches no file"), std::string::npos) << r.output;
  fs::rename(d / "moved", d / "data");
  r = run_ratchet(fake_run(dir, "--scheduler none --quiet"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_events(dir, "failed"), 0);
  {
    const json st = status(dir);  // the loop must not range over a dead temporary
    for (const auto& t : st["trials"]) EXPECT_EQ(t["state"], "done") << t.dump();
  }
  EXPECT_EQ(status(dir)["best_trial"]["id"], 1);
}

// A full disk as the trainer reports it (ENOSPC in its error): the same.
TEST(SweepFaults, AFullDiskStopsTheSweepWithoutFailingTrials) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(1e-3, 3e-3, 1e-2)\n");
  write_file(d / "full", "");
  const std::string trainer = faulty_trainer(
      d, "full.sh", "[ -e " + (d / "full") + " ]",
      "echo 'ratchet train: error: cannot write ckpt/step_1/state.h5: No space left on device'; exit 1");
  auto r = run_ratchet(fake_run(dir, "--scheduler none --quiet", trainer));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("a full disk: trial 0's trainer says"), std::string::npos) << r.output;
  EXPECT_EQ(count_events(dir, "failed"), 0);
  fs::remove(d / "full");
  r = run_ratchet(fake_run(dir, "--scheduler none --quiet", trainer));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_events(dir, "failed"), 0);
  EXPECT_EQ(status(dir)["best_trial"]["id"], 1);
}

// The same failure (exit code and message) for --shared-fault-trials trials
// in a row, no result between: a fault they share; none is failed. With the
// check off they fail, and a sweep whose every trial failed exits 1, also
// when rerun ("already ended" used to exit 0).
TEST(SweepFaults, TheSameFailureInARowIsASharedFault) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(1e-3, 3e-3, 1e-2, 2e-3, 5e-3)\n");
  write_file(d / "broken", "");
  const std::string trainer = faulty_trainer(d, "broken.sh", "[ -e " + (d / "broken") + " ]",
                                             "echo 'ratchet train: error: no CUDA driver'; exit 1");
  auto r = run_ratchet(fake_run(dir, "--scheduler none --quiet", trainer));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("3 trials in a row failed the same way (exit 1: ratchet train: error: no CUDA "
                          "driver)"), std::string::npos) << r.output;
  EXPECT_EQ(count_events(dir, "failed"), 2);  // journaled, then put back
  {
    const json st = status(dir);  // the loop must not range over a dead temporary
    for (const auto& t : st["trials"]) EXPECT_NE(t["state"], "failed") << t.dump();
  }
  fs::remove(d / "broken");
  r = run_ratchet(fake_run(dir, "--scheduler none --quiet", trainer));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const json st = status(dir);  // the loop must not range over a dead temporary
    for (const auto& t : st["trials"]) EXPECT_EQ(t["state"], "done") << t.dump();
  }

  const std::string dir2 = d / "off";
  init_fake(d, dir2, "lr = choice(1e-3, 3e-3, 1e-2, 2e-3, 5e-3)\n");
  write_file(d / "broken", "");
  r = run_ratchet(fake_run(dir2, "--scheduler none --quiet --shared-fault-trials 0", trainer));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("every trial of " + dir2 + " failed (5)"), std::string::npos) << r.output;
  r = run_ratchet(fake_run(dir2, "--scheduler none --quiet"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ended without a result"), std::string::npos) << r.output;
}

// The base as `ratchet train --config` reads it, at init: a key given twice,
// a line that is not key = value, a value of the wrong type, a relative input
// path; budgets the trainer refuses, at run. Each made every trial fail.
TEST(SweepFaults, TheBaseAndBudgetsAreCheckedAsTheTrainerWould) {
  TempDir d;
  write_file(d / "s.ini", "lr = choice(1e-3, 1e-2)\n");
  struct Case {
    std::string base, want;
  } cases[] = {
      {"val-data = /x\nlr = 1e-3\nlr = 2e-3\n",
       "line 3: 'lr' is set a second time (first on line 2): `ratchet train` refuses a key given twice"},
      {"val-data = /x\nwarmup\n", "line 2: 'warmup' is not 'key = value'"},
      {"val-data = /x\n[train]\nlr = 1\n", "line 2: '[train]': sections are not read by `ratchet train`"},
      {"val-data = /x\nlr = fast\n", "`ratchet train --config` refuses it"},
      {"val-data = data/val_*.h5\n", "line 1: val-data 'data/val_*.h5' is a relative path"},
      // A [train-data] section (data/mixture_ini.h) is read as the trainer reads it.
      {"val-data = /x\n[train-data]\ndata/a_*.h5 = 1\n", "line 3: [train-data] 'data/a_*.h5' is a relative path"},
      {"val-data = /x\n[train-data]\n/a_*.h5 = 0\n", "line 3: [train-data] '/a_*.h5' has the weight '0'"},
      {"val-data = /x\n[train-data]\n/a_*.h5 = 1\nlr = 1\n", "line 4: 'lr' is a `ratchet train` option"},
  };
  for (const auto& c : cases) {
    write_file(d / "b.ini", c.base);
    fs::remove_all(d / "x");
    auto r = run_ratchet("sweep init " + (d / "x") + " --space " + (d / "s.ini") + " --base " + (d / "b.ini") +
                         " --grid");
    EXPECT_EQ(r.exit_code, 2) << c.base << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << c.base << r.output;
    EXPECT_FALSE(fs::exists(d / "x/journal.jsonl")) << c.base;
  }
  // A base whose sources are a [train-data] section: accepted.
  write_file(d / "b.ini", "val-data = /x\n[train-data]\n/web_*.h5 = 0.7\n/books_*.h5 = 0.3\n");
  {
    auto r = run_ratchet("sweep init " + (d / "t") + " --space " + (d / "s.ini") + " --base " + (d / "b.ini") +
                         " --grid");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  // A searched preset under the base's own layers: every trial the same shape.
  write_file(d / "m.ini", "model = choice(d4, d6)\n");
  write_file(d / "b.ini", "val-data = /x\nlayers = 2\n");
  auto r = run_ratchet("sweep init " + (d / "y") + " --space " + (d / "m.ini") + " --base " + (d / "b.ini") +
                       " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("searches 'model' while --base " + (d / "b.ini") + " sets 'layers'"),
            std::string::npos) << r.output;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(3e-3)\n");
  for (const char* flags : {"--max-device-hours inf", "--max-cost inf", "--max-trial-device-hours inf",
                            "--max-device-hours -1"}) {
    r = run_ratchet(fake_run(dir, flags));
    EXPECT_EQ(r.exit_code, 2) << flags << r.output;
    EXPECT_NE(r.output.find("is not a budget: give a finite number >= 0"), std::string::npos) << flags << r.output;
  }
  // A sweep made by an older ratchet with a key twice in its base: refused
  // at run, naming the line, before any trial burns.
  write_file(dir + "/base.ini", read_file(dir + "/base.ini") + "steps = 9\n");
  r = run_ratchet(fake_run(dir));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 4: 'steps' is set a second time"), std::string::npos) << r.output;
  EXPECT_EQ(count_events(dir, "launched"), 0);
}

// --max-trial-device-hours is a budget like the others: trials it stops end
// the sweep with 76 and budget_reached, the report claims no saving, and a
// raised cap continues them. Before, the sweep exited 0 "every trial
// finished", sweep.json said budget_reached false, the report claimed 99%
// saved, and a raised cap said "already ended".
TEST(SweepFaults, TheTrialBudgetStopsAndResumes) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  // 2 device-seconds a trial: rung 0 (1 step) fits, rung 1 (3 steps) does not.
  auto r = run_ratchet(fake_run(dir, "--quiet --max-trial-device-hours " + std::to_string(2.0 / 3600)));
  ASSERT_EQ(r.exit_code, 76) << r.output;
  json j = status(dir);
  EXPECT_TRUE(j["budget_reached"].get<bool>());
  EXPECT_NE(j["end_reason"].get<std::string>().find("trial(s) stopped by --max-trial-device-hours"),
            std::string::npos) << j["end_reason"];
  EXPECT_EQ(invocations(dir, 5), "1\n");
  r = run_ratchet("sweep report " + dir + " --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("saved against"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no saving claimed: the sweep was stopped by a budget"), std::string::npos) << r.output;
  EXPECT_FALSE(json::parse(read_file(dir + "/sweep.json"))["saved_comparable"].get<bool>());
  // Raised: the stopped promotions run, to the end.
  r = run_ratchet(fake_run(dir, "--quiet --max-trial-device-hours " + std::to_string(100.0 / 3600)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(invocations(dir, 5), "1\n3\n9\n");
  j = status(dir);
  EXPECT_FALSE(j["budget_reached"].get<bool>());
  EXPECT_EQ(j["best_trial"]["id"], 5);
  EXPECT_EQ(j["best_trial"]["steps"], 9);
}

// A trial directory deleted between runs: the trial trains again from step 0,
// and what it had spent stays on it (journal record "carried") on top of the
// new directory's ledger. Before, the new ledger replaced it: trial 5 showed 9
// device-seconds for 10 trained.
TEST(SweepFaults, ADeletedTrialDirectoryKeepsItsSpendWhenRetrained) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  auto r = run_ratchet(fake_run(dir, "--quiet --max-trial-device-hours " + std::to_string(2.0 / 3600)));
  ASSERT_EQ(r.exit_code, 76) << r.output;
  ASSERT_EQ(invocations(dir, 5), "1\n");
  const double before = status(dir)["device_hours"].get<double>() * 3600;
  fs::remove_all(dir + "/trials/t0005");
  EXPECT_NEAR(status(dir)["device_hours"].get<double>() * 3600, before, 1e-6);
  r = run_ratchet(fake_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: trial 5's directory " + dir + "/trials/t0005 is gone"), std::string::npos)
      << r.output;
  EXPECT_EQ(invocations(dir, 5), "3\n9\n");  // from step 0 (the fake: 3 steps, then 6 more)
  const json j = status(dir);
  EXPECT_NEAR(j["trials"][5]["device_hours"].get<double>() * 3600, 1 + 9, 1e-6);
  EXPECT_EQ(count_events(dir, "carried"), 1);
}

// The "saved" estimate: each trial's steady step time times R plus one
// segment's fixed cost, not its whole spend (fixed costs of every short
// segment included) scaled by R / steps. With 5 fixed device-seconds per
// segment, a real grid (--scheduler none) costs 9 x (9 + 5) = 126; ASHA's
// estimate of it is that, not about 3.5 times that.
TEST(SweepFaults, TheSavedEstimateUsesStepTimeAndFixedCosts) {
  TempDir d;
  const std::string grid = d / "grid", asha = d / "asha";
  init_fake(d, grid);
  init_fake(d, asha);
  ASSERT_EQ(run_shell("FAKE_FIXED=5 " RATCHET_EXE " " + fake_run(grid, "--quiet --scheduler none")).exit_code, 0);
  ASSERT_EQ(run_shell("FAKE_FIXED=5 " RATCHET_EXE " " + fake_run(asha, "--quiet")).exit_code, 0);
  const double actual = status(grid)["device_hours"].get<double>() * 3600;
  EXPECT_NEAR(actual, 126, 1e-6);
  auto r = run_ratchet("sweep report " + asha + " --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(read_file(asha + "/sweep.json"));
  EXPECT_NEAR(j["all_to_max_steps_device_hours_estimate"].get<double>() * 3600, actual, 1e-6);
  EXPECT_TRUE(j["saved_comparable"].get<bool>());
  EXPECT_NE(r.output.find("device-s per segment (start-up, final evaluation and save), fitted to 9 trial"), std::string::npos) << r.output;
}

// `sweep run --help` is the subcommand's help alone.
TEST(SweepFaults, SubcommandHelpIsItsOwn) {
  for (const char* sub : {"init", "run", "status", "report"}) {
    auto r = run_ratchet(std::string("sweep ") + sub + " --help");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("ratchet sweep ") + sub + " options"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("`ratchet sweep <command> --help` lists"), std::string::npos) << sub << r.output;
  }
}

}  // namespace
