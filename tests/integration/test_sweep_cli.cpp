// `ratchet sweep` through the real binary. Most cases use a fake trainer
// (sweep_fake_trainer.sh: a synthetic learning curve, one device-second per
// step) so that decisions, spend and restarts can be checked exactly and
// fast; the end-to-end case trains real tiny models on King James shards.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testing/sweep_fake.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// "trial:rung:loss" of every result, in order.
std::vector<std::string> results(const std::string& dir) {
  std::vector<std::string> r;
  for (const auto& e : journal(dir))
    if (e["event"] == "result")
      r.push_back(std::to_string(e["trial"].get<int>()) + ":" + std::to_string(e["rung"].get<int>()) +
                  ":" + std::to_string(e["val_loss"].get<double>()));
  return r;
}

// A sweep directory over the fake trainer: base steps 9 (R), space kSpace9.
void init_fake(const TempDir& d, const std::string& dir, const std::string& space = kSpace9,
               const std::string& extra = "--grid --grid-in-order") {
  write_file(d / "val.h5", "");  // the controller checks that the base's inputs exist
  write_file(d / "base.ini", "val-data = " + (d / "val.h5") + "\nsteps = 9\n");
  write_file(d / "space.ini", space);
  auto r = run_ratchet("sweep init " + dir + " --space " + (d / "space.ini") + " --base " +
                       (d / "base.ini") + " " + extra);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

std::string fake_run(const std::string& dir, const std::string& flags = "") {
  return "sweep run " + dir + " --trainer '" + kFakeTrainer + "' --poll-seconds 0.01 --quiet " + flags;
}

TEST(SweepCli, AshaOnTheFakeCurve) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  auto r = run_ratchet(fake_run(dir, "--scheduler asha --eta 3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // rungs 1, 3, 9 (r = R/eta^2); grid order = lr order, so losses at rung 0
  // fall until lr 3e-3 (trial 5) and rise after it.
  const auto runs = journal(dir);
  json settings;
  for (const auto& e : runs)
    if (e["event"] == "run") settings = e;
  EXPECT_EQ(settings["rungs"], json({1, 3, 9}));
  // Every trial ran rung 0 once; the best (trial 5) went through every rung,
  // each segment resuming (steps 1, 3, 9: no step run twice).
  EXPECT_EQ(invocations(dir, 5), "1\n3\n9\n");
  int segments = 0;
  for (int t = 0; t < 9; t++) {
    const std::string inv = invocations(dir, t);
    EXPECT_EQ(inv.substr(0, 2), "1\n") << "trial " << t;
    segments += (int)std::count(inv.begin(), inv.end(), '\n');
  }
  EXPECT_EQ((int)results(dir).size(), segments);
  // Promotions are fewer than a full grid: 9 + at most 3 + at most 1... plus late ones.
  EXPECT_LT(segments, 9 * 3);
  auto st = run_ratchet("sweep status " + dir + " --json");
  ASSERT_EQ(st.exit_code, 0) << st.output;
  const json j = json::parse(st.output);
  EXPECT_EQ(j["best_trial"]["id"], 5);
  EXPECT_NEAR(j["best_val_loss"].get<double>(), 1 + 10.0 / 9, 1e-6);  // the curve's value
  // Spend: one device-second per step trained, summed over trials.
  double steps = 0;
  for (int t = 0; t < 9; t++) {
    std::stringstream ss(invocations(dir, t));
    double last = 0;
    for (double s; ss >> s;) last = s;
    steps += last;
  }
  EXPECT_NEAR(j["device_hours"].get<double>() * 3600, steps, 1e-6);
  // none: every trial straight to R in one segment.
  const std::string dir2 = d / "none";
  init_fake(d, dir2);
  r = run_ratchet(fake_run(dir2, "--scheduler none"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int t = 0; t < 9; t++) EXPECT_EQ(invocations(dir2, t), "9\n");
  // sha: all 9 at rung 0, then the top 3, then the top 1.
  const std::string dir3 = d / "sha";
  init_fake(d, dir3);
  r = run_ratchet(fake_run(dir3, "--scheduler sha"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(results(dir3).size(), 9u + 3u + 1u);
  EXPECT_EQ(invocations(dir3, 5), "1\n3\n9\n");
}

// The controller SIGKILLed right after each journal record it writes, then
// restarted: the same rung results in the same order, the same spend, and no
// segment run twice.
TEST(SweepCli, ControllerKilledAtEveryJournalPoint) {
  TempDir d;
  // Four trials, eta 2, rungs 1, 2, 4: every kind of record, about 25 points.
  const std::string space = "lr = choice(1e-3, 3e-3, 1e-2, 2e-3)\n";
  const std::string flags = "--eta 2 --max-steps 4";
  const std::string ref = d / "ref";
  init_fake(d, ref, space);
  ASSERT_EQ(run_ratchet(fake_run(ref, flags)).exit_code, 0);
  const auto want = results(ref);
  const size_t init_lines = 1 + 4;  // init + created
  const size_t points = journal(ref).size() - init_lines;
  ASSERT_GT(points, 15u);
  std::vector<std::string> want_inv;
  for (int t = 0; t < 4; t++) want_inv.push_back(invocations(ref, t));
  EXPECT_EQ(want_inv[1], "1\n2\n4\n");  // lr 3e-3 wins, resuming rung by rung
  for (size_t k = 1; k <= points; k++) {
    const std::string dir = d / ("k" + std::to_string(k));
    init_fake(d, dir, space);
    auto r = run_shell("RATCHET_FAULT='sweep-journal*" + std::to_string(k) + "' " RATCHET_EXE " " +
                       fake_run(dir, flags));
    ASSERT_NE(r.exit_code, 0) << "kill point " << k << " not reached: " << r.output;
    // Segments the killed controller left running finish on their own, or are adopted.
    r = run_ratchet(fake_run(dir, flags));
    ASSERT_EQ(r.exit_code, 0) << "kill point " << k << ": " << r.output;
    EXPECT_EQ(results(dir), want) << "kill point " << k;
    for (int t = 0; t < 4; t++)
      EXPECT_EQ(invocations(dir, t), want_inv[t]) << "kill point " << k << ", trial " << t;
  }
}

TEST(SweepCli, FailedNonFiniteAndPreemptedTrials) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  // lr 1e-4 fails (exit 1), 2e-4 logs NaN, 3e-3 (the best) is preempted once mid-rung.
  auto r = run_shell("FAKE_FAIL_LR=1e-4 FAKE_NAN_LR=2e-4 FAKE_PREEMPT_LR=3e-3 " RATCHET_EXE " " +
                     fake_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<int, std::string> failed;
  int requeued = 0;
  for (const auto& e : journal(dir)) {
    if (e["event"] == "failed") failed[e["trial"]] = e["reason"];
    if (e["event"] == "requeued") requeued++;
  }
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_NE(failed[0].find("exit 1"), std::string::npos) << failed[0];
  EXPECT_NE(failed[0].find("planted failure"), std::string::npos) << failed[0];  // the log tail
  EXPECT_NE(failed[1].find("no finite validation loss"), std::string::npos) << failed[1];
  EXPECT_EQ(requeued, 1);
  // The preempted segment resumed (stopped at step 0 of 1, then ran 1), and the
  // trial still leads: with two trials failed, 7 results at rung 0 promote 2
  // and 2 at rung 1 promote none (floor(2/3)), so nobody reaches rung 2.
  EXPECT_EQ(invocations(dir, 5), "1\n1\n3\n");
  auto st = run_ratchet("sweep status " + dir + " --json");
  EXPECT_EQ(json::parse(st.output)["best_trial"]["id"], 5);
  auto table = run_ratchet("sweep status " + dir);
  EXPECT_NE(table.output.find("failed"), std::string::npos) << table.output;

  // A trial that keeps stopping early is failed after --max-requeues, not retried forever.
  const std::string dir2 = d / "always";
  init_fake(d, dir2, "lr = choice(3e-3)\n");
  write_file(d / "exit75.sh", "echo stopping early; exit 75\n");
  r = run_ratchet("sweep run " + dir2 + " --trainer 'bash " + (d / "exit75.sh") +
                  "' --poll-seconds 0.01 --quiet --max-requeues 2");
  // Its only trial failed: exit 1 naming where the log tails are, not 0 and
  // "every trial finished".
  ASSERT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("every trial of " + dir2 + " failed (1)"), std::string::npos) << r.output;
  const json st2 = json::parse(run_ratchet("sweep status " + dir2 + " --json").output);
  EXPECT_EQ(st2["end_reason"], "every trial failed (1): no result");
  EXPECT_TRUE(st2["best_trial"].is_null());
  ASSERT_EQ(run_ratchet("sweep report " + dir2).exit_code, 0);  // the report still works
  int req = 0, fails = 0;
  for (const auto& e : journal(dir2)) {
    req += e["event"] == "requeued";
    fails += e["event"] == "failed";
  }
  EXPECT_EQ(req, 2);
  EXPECT_EQ(fails, 1);

  // A trainer that ends short of the rung with exit 0 (early stopping in the
  // base) is named as such, not "is val-data set?".
  const std::string dir3 = d / "early";
  init_fake(d, dir3, "lr = choice(3e-3)\n");
  write_file(d / "early.sh", "while [ $# -gt 0 ]; do [ \"$1\" = --run-dir ] && run=$2; shift; done\n"
                             "echo '{\"device_seconds\": 1, \"max_step\": 1}' > \"$run/ledger.json\"\n"
                             "echo 'early stop: no improvement in 1 evaluation(s)'\n");
  r = run_ratchet("sweep run " + dir3 + " --trainer 'bash " + (d / "early.sh") +
                  "' --poll-seconds 0.01 --quiet --scheduler none");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::string reason;
  for (const auto& e : journal(dir3))
    if (e["event"] == "failed") reason = e["reason"];
  EXPECT_NE(reason.find("the trainer ended at step 1 of 9"), std::string::npos) << reason;
}

TEST(SweepCli, BudgetStopsTheSweepAndCanBeRaised) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  // 12 device-seconds: the controller starts no segment it cannot pay for.
  const double budget_s = 12;
  const std::string budget = "--max-device-hours " + std::to_string(budget_s / 3600);
  auto r = run_ratchet(fake_run(dir, budget));
  ASSERT_EQ(r.exit_code, 76) << r.output;
  auto st = run_ratchet("sweep status " + dir + " --json");
  const json j = json::parse(st.output);
  EXPECT_LE(j["device_hours"].get<double>() * 3600, budget_s + 1e-6);
  EXPECT_GE(j["device_hours"].get<double>() * 3600, budget_s - 3);  // it used most of it
  EXPECT_TRUE(j["budget_reached"].get<bool>());
  EXPECT_GE(j["best_trial"]["id"].get<int>(), 0);  // ended with its best trial
  // A budget below what was spent: bad input naming the flag.
  r = run_ratchet(fake_run(dir, "--max-device-hours " + std::to_string(5.0 / 3600)));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-device-hours"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("already spent"), std::string::npos) << r.output;
  // Raised: the sweep continues to its end.
  r = run_ratchet(fake_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(invocations(dir, 5).substr(invocations(dir, 5).size() - 2), "9\n");
}

TEST(SweepCli, SecondControllerIsRefused) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(3e-3)\n");
  auto bg = run_shell("(FAKE_SLEEP=3 " RATCHET_EXE " " + fake_run(dir) + " > " + (d / "bg.log") +
                      " 2>&1 &) ; sleep 1; " RATCHET_EXE " " + fake_run(dir));
  EXPECT_EQ(bg.exit_code, 2) << bg.output;
  EXPECT_NE(bg.output.find("already run by another controller (host "), std::string::npos) << bg.output;
  EXPECT_NE(bg.output.find("pid "), std::string::npos) << bg.output;
  run_shell("sleep 4");
}

TEST(SweepCli, BadInputIsNamed) {
  TempDir d;
  write_file(d / "base.ini", "val-data = /x\nsteps = 9\n");
  auto init = [&](const std::string& space, const std::string& extra = "--grid") {
    write_file(d / "s.ini", space);
    fs::remove_all(d / "x");
    return run_ratchet("sweep init " + (d / "x") + " --space " + (d / "s.ini") + " --base " +
                       (d / "base.ini") + " " + extra);
  };
  struct Case {
    std::string space, extra, want;
  } cases[] = {
      {"learning-rate = choice(1, 2)\n", "--grid", "'learning-rate' is not a `ratchet train` option"},
      {"# nothing\n", "--grid", "defines no hyperparameter"},
      {"lr = loguniform(0, 1)\n", "--trials 3", "loguniform needs positive bounds"},
      {"lr = uniform(1e-3, 1e-2)\n", "--grid", "is not a choice(...)"},
      {"lr = normal(1, 2)\n", "--trials 2", "unknown distribution 'normal'"},
      {"steps = choice(1, 2)\n", "--grid", "'steps' is set by the sweep"},
      {"lr = choice(1e-3)\n", "", "give either --trials N"},
  };
  for (const auto& c : cases) {
    auto r = init(c.space, c.extra);
    EXPECT_EQ(r.exit_code, 2) << c.space << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << c.space << r.output;
  }
  // base without val-data
  write_file(d / "nobase.ini", "steps = 9\n");
  write_file(d / "s.ini", "lr = choice(1e-3)\n");
  auto r = run_ratchet("sweep init " + (d / "y") + " --space " + (d / "s.ini") + " --base " +
                       (d / "nobase.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("has no val-data"), std::string::npos) << r.output;
  // run: eta <= 1, r > R, unknown scheduler, a directory of another version
  const std::string dir = d / "sw";
  init_fake(d, dir);
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {"--eta 1", "--eta 1 must be greater than 1"},
           {"--min-steps 20", "--min-steps 20 is larger than --max-steps 9"},
           {"--scheduler pbt", "--scheduler 'pbt' is not known"},
           {"--executor ssh", "--executor 'ssh' is not known"},
           // NaN budgets used to mean "no budget" (NaN >= x is false); negative counts "the default".
           {"--max-device-hours nan", "--max-device-hours nan is not a budget"},
           {"--max-cost nan", "--max-cost nan is not a budget"},
           {"--max-trial-device-hours nan", "--max-trial-device-hours nan is not a budget"},
           {"--max-trials -1", "--max-trials -1 must be >= 0"},
           {"--max-steps -5", "--max-steps -5 must be >= 0"},
           {"--min-steps -1", "--min-steps -1 must be >= 0"},
           {"--threads-per-trial -3", "--threads-per-trial -3 must be >= 0"},
           {"--eta inf", "--eta inf must be greater than 1 and finite"},
           // trials past the device list ran with every device visible
           {"--gpus 0,1 --parallel 3", "--parallel 3 is more than the 2 device(s) of --gpus 0,1"},
           {"--gpus 0,,1", "--gpus '0,,1' has an empty device id"}}) {
    r = run_ratchet(fake_run(dir, flags));
    EXPECT_EQ(r.exit_code, 2) << flags << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << flags << r.output;
  }
  r = run_ratchet("sweep run " + (d / "nowhere"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("not found: is this a sweep directory?"), std::string::npos) << r.output;
  std::string j = read_file(dir + "/journal.jsonl");
  j.replace(j.find("\"version\":1"), 11, "\"version\":99");
  write_file(dir + "/journal.jsonl", j);
  r = run_ratchet("sweep status " + dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("journal version 99"), std::string::npos) << r.output;
}

// Hostile input found by an audit: each was a crash, a hang, or a silently
// wrong or smaller sweep before.
TEST(SweepCli, HostileInitInputIsRefusedOrHandled) {
  TempDir d;
  write_file(d / "base.ini", "val-data = /x\nsteps = 9\n");
  write_file(d / "s.ini", "lr = choice(1e-3, 1e-2)\n");
  const std::string init = "sweep init " + (d / "x") + " --space " + (d / "s.ini") + " --base ";
  // 10^8 trials were sampled into memory (then 10^8 fsynced lines); refused at once.
  auto r = run_ratchet(init + (d / "base.ini") + " --trials 100000000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--trials 100000000 is more than the 10000 "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d / "x"));
  // A directory given as the space or base read as an empty file ("defines no
  // hyperparameter", "has no val-data").
  fs::create_directories(d / "adir");
  r = run_ratchet(init + (d / "adir") + " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--base " + (d / "adir") + " is a directory"), std::string::npos) << r.output;
  // Keys the trainer would refuse made every trial fail with exit 2.
  write_file(d / "b2.ini", "val-data = /x\nlearning-rate = 0.1\n");
  r = run_ratchet(init + (d / "b2.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 2: 'learning-rate' is not a `ratchet train` option"), std::string::npos) << r.output;
  write_file(d / "b3.ini", "val-data = /x\nweight-decay = 0.1 ; note\n");
  r = run_ratchet(init + (d / "b3.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 2: '0.1 ; note': ';' does not start a comment"), std::string::npos) << r.output;
  // steps = 1e3 read as R = 1.
  write_file(d / "b1.ini", "val-data = /x\nsteps = 1e3\n");
  r = run_ratchet(init + (d / "b1.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 2: steps '1e3' is not a positive integer"), std::string::npos) << r.output;
  // A UTF-8 BOM before val-data: accepted, and the sweep's copy has none (the
  // trainer reads DIR/base.ini).
  write_file(d / "bom.ini", "\xEF\xBB\xBFval-data = /x\nsteps = 9\n");
  r = run_ratchet(init + (d / "bom.ini") + " --grid");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(d / "x/base.ini"), "val-data = /x\nsteps = 9\n");
  // A directory holding the user's own, different base.ini: not overwritten.
  fs::create_directories(d / "mine");
  write_file(d / "mine/base.ini", "my notes\n");
  r = run_ratchet("sweep init " + (d / "mine") + " --space " + (d / "s.ini") + " --base " +
                  (d / "base.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("mine/base.ini exists and differs from --base"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(d / "mine/base.ini"), "my notes\n");
  // ... but its own base.ini given as --base is fine (copied onto itself).
  write_file(d / "mine/base.ini", "val-data = /x\nsteps = 9\n");
  r = run_ratchet("sweep init " + (d / "mine") + " --space " + (d / "s.ini") + " --base " +
                  (d / "mine/base.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // --tag trial=... would have replaced the sweep's own label in every ledger.
  r = run_ratchet(init + (d / "base.ini") + " --grid --tag trial=5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'trial' is set by the sweep on every trial"), std::string::npos) << r.output;
  // Options the sweep passes to every trial cannot be searched (each trial got
  // them twice and failed with exit 2).
  for (const char* opt : {"max-device-hours", "max-cost", "quiet"}) {
    write_file(d / "s2.ini", std::string(opt) + " = choice(1, 2)\n");
    fs::remove_all(d / "y");
    r = run_ratchet("sweep init " + (d / "y") + " --space " + (d / "s2.ini") + " --base " +
                    (d / "base.ini") + " --grid");
    EXPECT_EQ(r.exit_code, 2) << opt << r.output;
    EXPECT_NE(r.output.find("is set by the sweep itself"), std::string::npos) << opt << r.output;
  }
  // A journal deleted by hand, then init again over the old trials: the new
  // trials took the old ones' finished segments (their losses, other
  // configurations) as their own, without running anything.
  const std::string old_sweep = d / "again";
  init_fake(d, old_sweep);
  ASSERT_EQ(run_ratchet(fake_run(old_sweep)).exit_code, 0);
  fs::remove(old_sweep + "/journal.jsonl");
  r = run_ratchet("sweep init " + old_sweep + " --space " + (d / "s.ini") + " --base " + (d / "base.ini") +
                  " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(old_sweep + "/trials holds the trials of an earlier sweep"), std::string::npos)
      << r.output;
  // init killed while it writes the journal: no sweep with some trials missing
  // (it used to append line by line: a kill after 3 lines left a 2-trial sweep
  // that a second init refused to replace). Now nothing, and init runs again.
  write_file(d / "s9.ini", kSpace9);
  r = run_shell("RATCHET_FAULT='sweep-journal-create' " RATCHET_EXE " sweep init " + (d / "k") +
                " --space " + (d / "s9.ini") + " --base " + (d / "base.ini") + " --grid");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(d / "k/journal.jsonl"));
  r = run_ratchet("sweep init " + (d / "k") + " --space " + (d / "s9.ini") + " --base " +
                  (d / "base.ini") + " --grid");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(journal(d / "k").size(), 1u + 9u);
}

// --max-trials is a budget: a sweep it cuts short ends with 76 and "budget
// reached", and a rerun with it raised goes on (it used to end "every trial
// finished", and a rerun did nothing).
TEST(SweepCli, MaxTrialsIsABudgetThatCanBeRaised) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  auto r = run_ratchet(fake_run(dir, "--max-trials 2"));
  ASSERT_EQ(r.exit_code, 76) << r.output;
  json j = json::parse(run_ratchet("sweep status " + dir + " --json").output);
  EXPECT_TRUE(j["budget_reached"].get<bool>());
  EXPECT_NE(j["end_reason"].get<std::string>().find("--max-trials 2 reached (2 of 9 trials started)"),
            std::string::npos) << j["end_reason"];
  r = run_ratchet(fake_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = json::parse(run_ratchet("sweep status " + dir + " --json").output);
  for (const auto& t : j["trials"]) EXPECT_NE(t["state"], "pending") << t.dump();
  EXPECT_EQ(j["best_trial"]["id"], 5);
  EXPECT_EQ(j["end_reason"], "every trial finished");
}

// A full disk: `sweep report` used to replace the last good sweep.json with an
// empty file and say "wrote"; a segment whose wrapper could not write its pid
// and exit code looked killed, was requeued and failed its trial in a second.
// (ulimit -f makes writes past 1 KiB fail with EFBIG, like ENOSPC.)
TEST(SweepCli, AFullDiskLosesNoReportAndFailsNoTrial) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  ASSERT_EQ(run_ratchet(fake_run(dir)).exit_code, 0);
  auto r = run_ratchet("sweep report " + dir + " --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string good = read_file(dir + "/sweep.json");
  ASSERT_GT(good.size(), 1024u);
  r = run_shell("trap '' XFSZ; ulimit -f 1; " RATCHET_EXE " sweep report " + dir + " --no-plot");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot write " + dir + "/sweep.json"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir + "/sweep.json"), good);
  EXPECT_FALSE(fs::exists(dir + "/sweep.json.tmp"));
  // A segment that cannot be written stops the controller before the launch;
  // nothing is failed, and the rerun completes.
  const std::string dir2 = d / "sw2";
  init_fake(d, dir2);
  fs::create_directories(dir2 + "/trials/t0000/seg-r0-a0.cmd");  // a path no file can be written to
  r = run_ratchet(fake_run(dir2));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("seg-r0-a0.cmd (disk full or read-only?): the controller stops before "
                          "launching trial 0"), std::string::npos) << r.output;
  fs::remove_all(dir2 + "/trials/t0000/seg-r0-a0.cmd");
  r = run_ratchet(fake_run(dir2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& e : journal(dir2)) EXPECT_NE(e["event"], "failed") << e.dump();
  EXPECT_EQ(results(dir2), results(dir));
}

// A trial directory deleted by hand used to refund its spend to the sweep's
// budget (the spend was read from ledger.json alone): the journal's record is
// now a floor, and the controller says the directory is gone.
TEST(SweepCli, ADeletedTrialDirectoryKeepsItsSpend) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  ASSERT_EQ(run_ratchet(fake_run(dir, "--max-trials 6")).exit_code, 76);
  const double before = json::parse(run_ratchet("sweep status " + dir + " --json").output)["device_hours"];
  ASSERT_EQ(invocations(dir, 5), "1\n3\n9\n");
  fs::remove_all(dir + "/trials/t0005");
  const json j = json::parse(run_ratchet("sweep status " + dir + " --json").output);
  EXPECT_NEAR(j["device_hours"].get<double>(), before, 1e-12);
  EXPECT_NEAR(j["trials"][5]["device_hours"].get<double>() * 3600, 9, 1e-9);
  auto r = run_ratchet("sweep run " + dir + " --trainer '" + kFakeTrainer + "' --poll-seconds 0.01");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: trial 5's directory " + dir + "/trials/t0005 is gone"), std::string::npos)
      << r.output;
  EXPECT_GE(json::parse(run_ratchet("sweep status " + dir + " --json").output)["device_hours"].get<double>(),
            before);
}

// A controller killed between fork() and journaling the launch: its child may
// not have written the segment's pid file yet when the restarted controller
// looks (a loaded node), and the segment was started a second time. The
// launch now leaves a marker first; a successor finding it waits for the pid
// file. Here the "slow child" is played by hand: marker now, pid file after 1 s.
TEST(SweepCli, ASegmentForkedByAKilledControllerIsNotStartedTwice) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir);
  const std::string t0 = dir + "/trials/t0000";
  fs::create_directories(t0);
  write_file(t0 + "/seg-r0-a0.launching", "\n");
  auto r = run_shell("( sleep 1; " + kFakeTrainer + " --run-dir " + t0 + " --steps 1 --lr 1e-4 >> " + t0 +
                     "/train.log 2>&1; echo 0 > " + t0 + "/seg-r0-a0.exit; echo 999999 > " + t0 +
                     "/seg-r0-a0.pid ) & " RATCHET_EXE " " + fake_run(dir) + "; wait");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(invocations(dir, 0), "1\n");  // adopted, not run again
  bool adopted = false;
  for (const auto& e : journal(dir))
    adopted |= e["event"] == "launched" && e["trial"] == 0 && e["handle"] == "999999";
  EXPECT_TRUE(adopted);
  // The wait runs from the marker's time, not from each restart: a controller
  // killed every second (a chaos run) waited 5 s anew each time and never got
  // on. A marker older than 5 s without a pid file: launched at once (a
  // liveness bound of 4 s for a one-trial sweep, not a speed target).
  const std::string dir2 = d / "old";
  init_fake(d, dir2, "lr = choice(3e-3)\n");
  fs::create_directories(dir2 + "/trials/t0000");
  write_file(dir2 + "/trials/t0000/seg-r0-a0.launching", "\n");
  fs::last_write_time(dir2 + "/trials/t0000/seg-r0-a0.launching",
                      fs::file_time_type::clock::now() - std::chrono::seconds(60));
  r = run_shell("timeout 4 " RATCHET_EXE " " + fake_run(dir2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(invocations(dir2, 0), "1\n");
}

// A quote in the sweep directory or in a choice value broke the gnuplot
// script (report failed after writing sweep.json): quoted now.
TEST(SweepCli, ReportPlotsWithQuotesInPathsAndValues) {
  TempDir d;
  const std::string dir = d / "it's";
  const std::string q = "'" + d.path + "/it'\\''s'";  // the directory, quoted for the shell
  write_file(d / "val.h5", "");
  write_file(d / "base.ini", "val-data = " + (d / "val.h5") + "\nsteps = 9\n");
  write_file(d / "space.ini", "lr = choice(1e-3, 3e-3)\nmodel = choice(it's, d4)\n");
  auto r = run_ratchet("sweep init " + q + " --space " + (d / "space.ini") + " --base " + (d / "base.ini") +
                       " --grid");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("sweep run " + q + " --trainer '" + kFakeTrainer + "' --poll-seconds 0.01 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("sweep report " + q);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"/sweep.png", "/sweep.svg"})
    EXPECT_TRUE(fs::exists(dir + f) && fs::file_size(dir + f) > 0) << f;
  EXPECT_FALSE(fs::exists(dir + "/sweep.png.tmp"));
  EXPECT_NE(read_file(dir + "/sweep.svg").find("it's"), std::string::npos);  // the tic label
}

// Issue 25, item 15: a GPU node without gnuplot stopped `sweep report` with an
// error and no summary. The summary is text: written, the plots skipped with
// a warning that names gnuplot, exit 0.
TEST(SweepCli, ReportWithoutGnuplotWritesTheSummary) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(1e-3, 3e-3)\n", "--grid");
  auto r = run_ratchet(fake_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::create_directories(d / "bin");  // PATH: no gnuplot there
  r = run_shell("PATH=" + (d / "bin") + " " RATCHET_EXE " sweep report " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: plots skipped: gnuplot not found"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ratchet sweep report " + dir), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote " + dir + "/sweep.md, " + dir + "/sweep.json\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("trial"), std::string::npos) << r.output;  // the status table
  EXPECT_FALSE(fs::exists(dir + "/sweep.png"));
  const std::string md = read_file(dir + "/sweep.md");
  EXPECT_EQ(md.find("![plots](sweep.png)"), std::string::npos) << md;  // no dangling link
  EXPECT_NE(md.find("no plots"), std::string::npos) << md;
  EXPECT_TRUE(read_json_file(dir + "/sweep.json").is_object());
  // A gnuplot named by hand that is not there is a bad flag.
  r = run_ratchet("sweep report " + dir + " --gnuplot " + (d / "bin/gnuplot"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("gnuplot-nox"), std::string::npos) << r.output;
}

// Restarted with another executor while a segment runs: sbatch would poll a
// pid as a job id, find no such job, count the segment lost and start it again.
TEST(SweepCli, AnotherExecutorIsRefusedWhileSegmentsAreInFlight) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(3e-3)\n");
  // killed right after journaling the first launch; the segment sleeps 2 s
  auto r = run_shell("FAKE_SLEEP=2 RATCHET_FAULT='sweep-journal*2' " RATCHET_EXE " " + fake_run(dir));
  ASSERT_NE(r.exit_code, 0) << r.output;
  r = run_ratchet(fake_run(dir, "--executor sbatch --sbatch-template " + (d / "base.ini")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("1 segment(s) of " + dir + " started by --executor local are still in flight"),
            std::string::npos) << r.output;
  r = run_ratchet(fake_run(dir));  // the same executor adopts it
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(invocations(dir, 0), "1\n");  // run once (one trial: ASHA promotes none)
  // (and oversubscribed threads are pointed out, not refused)
  r = run_ratchet("sweep run " + dir + " --trainer '" + kFakeTrainer + "' --threads-per-trial 100000 --parallel 2");
  EXPECT_NE(r.output.find("warning: --parallel 2 x --threads-per-trial 100000 = 200000 threads on "),
            std::string::npos) << r.output;
  EXPECT_EQ(results(dir).size(), 1u);
}

// A segment stopped early again and again but further each time (preempted,
// or a base `time-limit` ending every attempt with a checkpoint) used to fail
// its trial after --max-requeues stops; only stops without progress count now.
TEST(SweepCli, AnEarlyStopThatProgressesIsNotAFailure) {
  TempDir d;
  const std::string dir = d / "sw";
  init_fake(d, dir, "lr = choice(3e-3, 1e-2)\n");
  // --scheduler none: 9 steps in one segment; lr 3e-3 stops at 4, 6, 7, 8, then ends.
  auto r = run_shell("FAKE_PREEMPT_LR=3e-3 FAKE_PREEMPT_TIMES=4 " RATCHET_EXE " " +
                     fake_run(dir, "--scheduler none --max-requeues 2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(invocations(dir, 0), "9\n9\n9\n9\n9\n");
  int requeued = 0;
  for (const auto& e : journal(dir)) {
    EXPECT_NE(e["event"], "failed") << e.dump();
    if (e["event"] == "requeued") {
      requeued++;
      EXPECT_TRUE(e["progress"].get<bool>()) << e.dump();
    }
  }
  EXPECT_EQ(requeued, 4);
  const json j = json::parse(run_ratchet("sweep status " + dir + " --json").output);
  EXPECT_EQ(j["best_trial"]["id"], 0);
  EXPECT_NEAR(j["trials"][0]["device_hours"].get<double>() * 3600, 9, 1e-9);  // no step paid twice
}

// Real tiny models on King James shards: rung results from the trainer's own
// evaluations, ledgers labelled with sweep and trial, the report's files, and
// `ratchet report` over the trial directories summing spend per tag.
TEST(SweepCli, EndToEndWithTheRealTrainer) {
  TempDir d;
  ASSERT_EQ(shard_bible(d, "Gen1:1-Gen5:32"), "");
  write_file(d / "base.ini",
             "model = custom\nlayers = 2\nheads = 2\nchannels = 32\nmax-seq-len = 32\n"
             "seq-len = 16\nbatch-size = 2\neval-batches = 2\nsteps = 9\n"
             "price-per-device-hour = 2\n"
             "train-data = " + (d / "data/train_*.h5") + "\nval-data = " + (d / "data/val_*.h5") + "\n");
  write_file(d / "space.ini", "lr = choice(1e-4, 1e-3, 1e-2)\nwarmup-steps = choice(0, 2, 4)\n");
  const std::string dir = d / "sw";
  auto r = run_ratchet("sweep init " + dir + " --space " + (d / "space.ini") + " --base " +
                       (d / "base.ini") + " --grid --tag project=bible");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("sweep run " + dir + " --parallel 2 --eta 3 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("sweep report " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(read_file(dir + "/sweep.json"));
  for (const char* k : {"best_val_loss", "best_trial", "device_hours", "cost", "trials", "continue_command"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["trials"].size(), 9u);
  EXPECT_GT(j["device_hours"].get<double>(), 0);
  EXPECT_NEAR(j["cost"].get<double>(), 2 * j["device_hours"].get<double>(), 1e-9);
  EXPECT_LT(j["best_val_loss"].get<double>(), 5.5);  // below ln(257): it learned something
  EXPECT_EQ(j["best_trial"]["steps"], 9);
  EXPECT_TRUE(fs::exists(dir + "/sweep.png") && fs::file_size(dir + "/sweep.png") > 0);
  EXPECT_TRUE(fs::exists(dir + "/sweep.svg") && fs::file_size(dir + "/sweep.svg") > 0);
  EXPECT_TRUE(fs::exists(dir + "/sweep.md"));
  const int best = j["best_trial"]["id"];
  char name[32];
  std::snprintf(name, sizeof name, "/trials/t%04d", best);
  const json ledger = json::parse(read_file(dir + name + "/ledger.json"));
  EXPECT_EQ(ledger["tag.trial"], std::to_string(best));
  EXPECT_EQ(ledger["tag.project"], "bible");
  EXPECT_EQ(ledger["tag.sweep"], j["sweep_id"]);
  // The rung losses are the trainer's own evaluations at the rung's step.
  bool found = false;
  std::ifstream log(dir + name + "/train.jsonl");
  for (std::string line; std::getline(log, line);) {
    const json e = json::parse(line);
    if (e.contains("val_loss") && e["step"] == 9)
      found = std::abs(e["val_loss"].get<double>() - j["best_val_loss"].get<double>()) < 1e-6;
  }
  EXPECT_TRUE(found) << "no val_loss at step 9 equal to the rung result";
  // spend per tag over the directory of runs
  r = run_ratchet("report " + dir + "/trials --by-tag");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("project=bible"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sweep=" + j["sweep_id"].get<std::string>()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trial=" + std::to_string(best)), std::string::npos) << r.output;
}

// A sweep stopped by its budget mid-segment (the trainer saves and exits 76)
// and rerun with the budget raised continues the stopped trial from its
// checkpoint: no step is trained twice, and with one trial at a time the
// decisions and losses equal those of a sweep that never had the budget.
TEST(SweepCli, BudgetStoppedTrialResumesWhenRaised) {
  TempDir d;
  ASSERT_EQ(shard_bible(d, "Gen1:1-Gen3:24"), "");
  write_file(d / "base.ini",
             "model = custom\nlayers = 2\nheads = 2\nchannels = 32\nmax-seq-len = 32\n"
             "seq-len = 16\nbatch-size = 2\neval-batches = 2\nsteps = 12\n"
             "train-data = " + (d / "data/train_*.h5") + "\nval-data = " + (d / "data/val_*.h5") + "\n");
  write_file(d / "space.ini", "lr = choice(1e-3, 1e-2)\nwarmup-steps = choice(0, 4)\n");
  const std::string flags = " --parallel 1 --threads-per-trial 1 --eta 2 --min-steps 3 --quiet";
  for (const char* name : {"straight", "raised"}) {
    auto r = run_ratchet("sweep init " + (d / name) + " --space " + (d / "space.ini") + " --base " +
                         (d / "base.ini") + " --grid --grid-in-order");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  auto r = run_ratchet("sweep run " + (d / "straight") + flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A budget far below one step's cost: the first trial (nothing measured yet,
  // so it starts) stops itself at its first step boundary.
  r = run_ratchet("sweep run " + (d / "raised") + flags + " --max-device-hours 1e-9");
  ASSERT_EQ(r.exit_code, 76) << r.output;
  bool stopped = false;
  for (const auto& e : journal(d / "raised"))
    stopped |= e["event"] == "stopped" && e["trial"] == 0 && e.value("budget", false);
  ASSERT_TRUE(stopped) << read_file(d / "raised/journal.jsonl");
  const json before = json::parse(read_file(d / "raised/trials/t0000/ledger.json"));
  ASSERT_EQ(before["state"], 76);
  ASSERT_LT(before["max_step"].get<double>(), 3);  // mid-segment: rung 0 is 3 steps
  // Raised (here: no budget at all): trial 0 resumes its checkpoint first.
  r = run_ratchet("sweep run " + (d / "raised") + flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(results(d / "raised"), results(d / "straight"));
  std::vector<std::string> seq;  // launches, in order: the same decisions
  for (const char* name : {"straight", "raised"}) {
    std::string s;
    for (const auto& e : journal(d / name))
      if (e["event"] == "launched") s += std::to_string(e["trial"].get<int>()) + "@" + std::to_string(e["rung"].get<int>()) + " ";
    seq.push_back(s);
  }
  // "raised" launches trial 0's rung 0 twice (stopped, then resumed): drop the first.
  EXPECT_EQ(seq[1].substr(seq[1].find(' ') + 1), seq[0]);
  const json after = json::parse(read_file(d / "raised/trials/t0000/ledger.json"));
  EXPECT_EQ(after["steps_lost"], 0);  // no recomputed steps
  EXPECT_GE(after["resumes"].get<double>(), 1);
  EXPECT_NE(read_file(d / "raised/trials/t0000/train.log").find("resume: continuing from step"),
            std::string::npos);
  bool resumed = false;
  for (const auto& e : journal(d / "raised")) resumed |= e["event"] == "resumed" && e["trial"] == 0;
  EXPECT_TRUE(resumed);
}

// Promotion = resume with a larger --steps under --schedule-steps R: the
// weights equal, byte for byte, those of a run trained straight to R.
TEST(SweepCli, PromotionByResumeIsBitIdentical) {
  TempDir d;
  ASSERT_EQ(shard_bible(d, "Gen1:1-Gen3:24"), "");
  const std::string common =
      "train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 16 "
      "--batch-size 2 --threads 1 --quiet --lr 3e-3 --warmup-steps 2 --eval-batches 2 "
      "--train-data '" + (d / "data/train_*.h5") + "' --val-data '" + (d / "data/val_*.h5") + "'";
  auto r = run_ratchet(common + " --steps 12 --run-dir " + (d / "straight") + " --export " +
                       (d / "straight.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int s : {2, 6}) {
    r = run_ratchet(common + " --steps " + std::to_string(s) + " --schedule-steps 12 --run-dir " +
                    (d / "rungs"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  r = run_ratchet(common + " --steps 12 --schedule-steps 12 --run-dir " + (d / "rungs") +
                  " --export " + (d / "rungs.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: continuing from step 6"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(d / "straight.bin"), read_file(d / "rungs.bin"));
  // Without --schedule-steps the cosine of a 6-step run ends early: not the same.
  r = run_ratchet(common + " --steps 6 --run-dir " + (d / "naive"));
  ASSERT_EQ(r.exit_code, 0);
  r = run_ratchet(common + " --steps 12 --run-dir " + (d / "naive") + " --export " + (d / "naive.bin"));
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(read_file(d / "straight.bin"), read_file(d / "naive.bin"));
  // --schedule-steps below --steps is refused.
  r = run_ratchet(common + " --steps 6 --schedule-steps 4 --run-dir " + (d / "bad"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--schedule-steps 4 must be at least --steps 6"), std::string::npos) << r.output;
}

}  // namespace
