// Cost guardrails through the real binary: the ledger across a real requeue,
// each budget (exit 76, resumable), early stopping on a planted plateau,
// --ckpt-every auto, --batch-size auto.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include "model/gpt.h"
#include "model/memory.h"
#include "model/recompute.h"
#include "backend/backend.h"
#include "model/param_layout.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class Guardrails : public BibleShardsSuite {
 protected:
  // 64 tokens per step (B=2, T=16, 2 micro-batches).
  static std::string cmd(const std::string& run_dir, int steps) {
    return "train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 "
           "--seq-len 16 --batch-size 2 --total-batch-tokens 64 --threads 1 --quiet "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-batches 2 --steps " + std::to_string(steps) +
           " --run-dir " + run_dir;
  }
  // One attempt of a run: `env` (RATCHET_FAULT=..., RATCHET_TEST_FAIL=... or
  // "") before the trainer; true when it exits with `rc` (else says why).
  static bool attempt(const std::string& env, const std::string& c, int rc) {
    auto r = run_shell(env + " " RATCHET_EXE " " + c);
    if (r.exit_code == rc) return true;
    ADD_FAILURE() << env << ": exit " << r.exit_code << ", expected " << rc << "\n" << r.output;
    return false;
  }
  static double ledger(const std::string& run_dir, const std::string& key) {
    const nlohmann::json j = read_json_file(run_dir + "/ledger.json");
    EXPECT_TRUE(j.contains(key) && j[key].is_number()) << key << " missing in " << j.dump();
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
  }
};

TEST_F(Guardrails, LedgerSumsAcrossAStopAndAKill) {
  TempDir d;
  const std::string run = d / "run";
  // attempt 1: preempted by SIGUSR1 after step 5 (saves at 5)
  auto r = run_shell("RATCHET_FAULT=USR1@step-5 " RATCHET_EXE " " + cmd(run, 12) +
                     " --ckpt-every-steps 4 --price-per-device-hour 3600");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_EQ(ledger(run, "state"), 75);
  EXPECT_EQ(ledger(run, "tokens"), 5 * 64);
  const double wall1 = ledger(run, "wall_seconds");
  // attempt 2: resumes at 5, checkpoint at 8, killed (SIGKILL) after step 10
  r = run_shell("RATCHET_FAULT=step-10 " RATCHET_EXE " " + cmd(run, 12) +
                " --ckpt-every-steps 4 --price-per-device-hour 3600");
  ASSERT_EQ(r.exit_code, 137) << r.output;
  EXPECT_EQ(ledger(run, "max_step"), 10);
  EXPECT_EQ(ledger(run, "state"), 0);  // it never got to say how it ended
  const double wall2 = ledger(run, "wall_seconds");
  EXPECT_GT(wall2, wall1);
  // attempt 3: resumes at 8 (steps 9, 10 are recomputed), finishes
  r = run_ratchet(cmd(run, 12) + " --ckpt-every-steps 4 --price-per-device-hour 3600");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 step(s) since the checkpoint are recomputed"), std::string::npos)
      << r.output;
  EXPECT_EQ(ledger(run, "state"), 1);
  EXPECT_EQ(ledger(run, "resumes"), 2);
  EXPECT_EQ(ledger(run, "preemptions"), 2);
  EXPECT_EQ(ledger(run, "steps_lost"), 2);
  EXPECT_EQ(ledger(run, "tokens"), (5 + 5 + 4) * 64);  // every token trained, recomputed included
  EXPECT_GT(ledger(run, "wall_seconds"), wall2);
  // cost = device-hours x price (3600 per hour: one unit per device-second)
  EXPECT_NEAR(ledger(run, "cost"), ledger(run, "device_seconds"), 1e-9);
  EXPECT_GT(ledger(run, "ckpt_save_seconds"), 0);
  EXPECT_GT(ledger(run, "ckpt_load_seconds"), 0);
  EXPECT_GE(ledger(run, "data_wait_seconds"), 0);
  EXPECT_NE(r.output.find("ledger: "), std::string::npos);
}

// Found by the chaos run (scripts/chaos.sh): a resume behind the furthest step
// of an earlier attempt counted that attempt's extra steps as lost once more.
TEST_F(Guardrails, StepsLostAreCountedOnceWhenAResumeStopsShortOfAnEarlierAttempt) {
  TempDir d;
  const std::string run = d / "run";
  const std::string c = cmd(run, 12) + " --ckpt-every-steps 4";
  // attempt 1: checkpoint at 4, killed after step 7
  ASSERT_TRUE(attempt("RATCHET_FAULT=step-7", c, 137));
  // attempt 2: resumes at 4 (steps 5..7 lost), stopped after step 5 (saves 5)
  ASSERT_TRUE(attempt("RATCHET_FAULT=USR1@step-5", c, 75));
  EXPECT_EQ(ledger(run, "steps_lost"), 3);
  // attempt 3: resumes at 5, nothing lost, finishes
  auto r = run_ratchet(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 step(s) since the checkpoint are recomputed"), std::string::npos)
      << r.output;
  EXPECT_EQ(ledger(run, "steps_lost"), 3);
  EXPECT_EQ(ledger(run, "preemptions"), 2);
  EXPECT_EQ(ledger(run, "resumes"), 2);
  EXPECT_EQ(ledger(run, "tokens"), (7 + 1 + 7) * 64);  // = (12 + steps_lost) x 64
}

// Found by the chaos run: an attempt killed before its first step (here just
// before it resumes) was not counted as a preemption.
TEST_F(Guardrails, AnAttemptKilledBeforeItResumesIsStillAPreemption) {
  TempDir d;
  const std::string run = d / "run";
  const std::string c = cmd(run, 8) + " --ckpt-every-steps 4";
  ASSERT_TRUE(attempt("RATCHET_FAULT=USR1@step-3", c, 75));
  auto r = run_shell("RATCHET_FAULT=attempt-start " RATCHET_EXE " " + c);
  ASSERT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("the previous attempt ended early (preemption 1)"), std::string::npos)
      << r.output;
  r = run_ratchet(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ledger(run, "preemptions"), 2);  // the stop, and the kill before the resume
  EXPECT_EQ(ledger(run, "resumes"), 1);
  EXPECT_EQ(ledger(run, "tokens"), 8 * 64);
}

// An attempt killed while it sets up (opening data, allocating: minutes on a
// large corpus) is a preemption like any other, also the run's very first.
TEST_F(Guardrails, AttemptsKilledDuringSetupArePreemptions) {
  TempDir d;
  const std::string run = d / "run";
  const std::string c = cmd(run, 8) + " --ckpt-every-steps 4";
  ASSERT_TRUE(attempt("RATCHET_FAULT=setup-model", c, 137));  // the first attempt
  ASSERT_TRUE(attempt("RATCHET_FAULT=USR1@step-3", c, 75));
  for (int k = 0; k < 2; k++) ASSERT_TRUE(attempt("RATCHET_FAULT=setup-model", c, 137));
  auto r = run_ratchet(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ledger(run, "preemptions"), 4);  // the first kill, the stop, two kills in setup
  EXPECT_EQ(ledger(run, "resumes"), 1);
  EXPECT_EQ(ledger(run, "tokens"), 8 * 64);
}

// An attempt that fails while it sets up, on bad input or on an error, is not
// a preemption, and never replaces the spend that ledger.json holds.
TEST_F(Guardrails, AnAttemptThatFailsInSetupKeepsTheLedger) {
  TempDir d;
  const std::string run = d / "run";
  const std::string c = cmd(run, 8) + " --ckpt-every-steps 4";
  ASSERT_TRUE(attempt("RATCHET_FAULT=USR1@step-3", c, 75));
  ASSERT_TRUE(attempt("RATCHET_TEST_FAIL=0@setup", c, 2));  // bad input: exit 2
  ASSERT_TRUE(attempt("RATCHET_TEST_FAIL=0@setup-model", c, 1));  // an error: exit 1
  EXPECT_EQ(ledger(run, "tokens"), 3 * 64);  // attempt 1's spend, not a fresh ledger's 0
  EXPECT_EQ(ledger(run, "state"), 2);        // failed
  auto r = run_ratchet(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ledger(run, "preemptions"), 1);  // only the stop
  EXPECT_EQ(ledger(run, "tokens"), 8 * 64);
  // A finished run stays finished when a later attempt on it fails on bad input.
  ASSERT_TRUE(attempt("RATCHET_TEST_FAIL=0@setup", c, 2));
  EXPECT_EQ(ledger(run, "state"), 1);  // done
}

// Found by the chaos run: an attempt killed before the first checkpoint had
// its spend dropped by the next attempt, which started the ledger over.
TEST_F(Guardrails, AnAttemptKilledBeforeTheFirstCheckpointKeepsItsSpend) {
  TempDir d;
  const std::string run = d / "run";
  const std::string c = cmd(run, 8) + " --ckpt-every-steps 6";
  ASSERT_TRUE(attempt("RATCHET_FAULT=step-3", c, 137));
  auto r = run_ratchet(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ledger(run, "preemptions"), 1);
  EXPECT_EQ(ledger(run, "resumes"), 0);
  EXPECT_EQ(ledger(run, "steps_lost"), 3);
  EXPECT_EQ(ledger(run, "tokens"), (3 + 8) * 64);
}

TEST_F(Guardrails, TokenBudgetStopsAtTheRightStepAndResumes) {
  TempDir d;
  const std::string run = d / "run";
  // 640 tokens = exactly 10 steps of 64
  auto r = run_ratchet(cmd(run, 50) + " --max-tokens 640");
  EXPECT_EQ(r.exit_code, 76) << r.output;
  EXPECT_NE(r.output.find("stopping at step 10: token budget reached"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("do not requeue"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run + "/ckpt/step_00000010/COMMITTED"));
  // a larger budget continues the same run from its checkpoint
  r = run_ratchet(cmd(run, 50) + " --max-tokens 1000");
  EXPECT_EQ(r.exit_code, 76) << r.output;
  EXPECT_NE(r.output.find("continuing from step 10"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopping at step 16: token budget reached"), std::string::npos)
      << r.output;  // ceil(1000 / 64) = 16
  EXPECT_EQ(ledger(run, "tokens"), 16 * 64);
}

TEST_F(Guardrails, TimeAndMoneyBudgetsStopCleanly) {
  struct Case {
    std::string flags, message;
  } cases[] = {
      {"--max-wall-time 1", "wall-time budget reached"},
      {"--max-device-hours 0.0003", "device-hour budget reached"},  // ~1.1 s
      {"--price-per-device-hour 7200 --max-cost 2", "cost budget reached"},  // 2 units = 1 s
  };
  for (const auto& c : cases) {
    TempDir d;
    auto r = run_ratchet(cmd(d / "run", 1000000) + " " + c.flags);
    EXPECT_EQ(r.exit_code, 76) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    EXPECT_EQ(ledger(d / "run", "state"), 76);
    const double wall = ledger(d / "run", "wall_seconds");
    EXPECT_GE(wall, 1.0) << c.flags;
    EXPECT_LT(wall, 10.0) << c.flags;  // stops at the first step boundary past the budget
  }
}

TEST_F(Guardrails, EarlyStoppingOnAPlantedPlateauKeepsTheBest) {
  TempDir d;
  const std::string run = d / "run";
  // lr 1e-9: the val loss barely moves, so no improvement beats min-delta 0.01:
  // evaluations at steps 0 (the first best), 2, 4 -> two without improvement -> stop at 4.
  auto r = run_ratchet(cmd(run, 100) + " --lr 1e-9 --eval-every 2 --early-stop-patience 2 "
                       "--early-stop-min-delta 0.01 --keep-last 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("early stopping at step 4"), std::string::npos) << r.output;
  // The best-loss checkpoint (whichever of steps 0, 2, 4 had the lowest loss)
  // survives retention with --keep-last 1, and `ckpt list` marks it.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("best [0-9.]+ at step ([0-9]+)")));
  const int best = std::stoi(m[1]);
  EXPECT_TRUE(best == 0 || best == 2 || best == 4) << best;
  EXPECT_TRUE(fs::exists(run + "/ckpt/step_0000000" + std::to_string(best) + "/COMMITTED"));
  r = run_ratchet("ckpt list " + run + "/ckpt");
  EXPECT_NE(r.output.find("best"), std::string::npos) << r.output;
}

TEST_F(Guardrails, CkptEveryAutoUsesYoungDaly) {
  TempDir d;
  // one preemption a second: MTBF 1 s, so the interval is sqrt(2 x save x 1 s)
  auto r = run_ratchet(cmd(d / "run", 1000000) + " --ckpt-every auto "
                       "--expected-preemptions-per-hour 3600 --max-wall-time 2");
  EXPECT_EQ(r.exit_code, 76) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex("save takes ([0-9.]+) s, mean time between preemptions 1 s -> a checkpoint "
                 "every ([0-9.]+) s")))
      << r.output;
  const double save = std::stod(m[1]), every = std::stod(m[2]);
  // save is printed to 1e-4 s, the interval to 1e-3 s: 0.005 covers both roundings
  // for any save above 0.1 ms (d sqrt(2s)/ds = 1/sqrt(2s)).
  EXPECT_NEAR(every, std::sqrt(2 * save), 0.005);
  EXPECT_NE(r.output.find("expected loss per preemption"), std::string::npos);
}

TEST_F(Guardrails, BatchSizeAutoPicksTheLargestThatFits) {
  TempDir d;
  using ratchet::parse_recompute;
  const ratchet::GPTConfig c = tiny_config(2, 2, 32, 257, 32);
  auto be = ratchet::make_cpu_backend(1);
  auto need = [&](int B, const char* policy) {
    return (double)ratchet::step_memory(c, B, 16, parse_recompute(policy), *be,
                                        ratchet::ParamLayout(c).total, 0)
        .total();
  };
  // A budget between the need of B=4 and of B=8 (total 8 rows of 16): B=4, 2 micro-batches.
  const double mb = (need(4, "none") + need(8, "none")) / 2 / 1e6;
  std::string flags = "train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 "
                      "--seq-len 16 --batch-size auto --total-batch-tokens 128 --steps 2 --quiet "
                      "--train-data '" + (*dir_ / "data/train_*.h5") + "' --memory-budget-mb ";
  auto r = run_ratchet(flags + std::to_string(mb));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch-size auto: B=4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 micro-batch(es) per step"), std::string::npos) << r.output;
  // Recomputing blocks makes B=8 fit a budget that B=8 without recompute does not.
  const double mb8 = (need(8, "blocks") + 1000) / 1e6;
  ASSERT_LT(mb8 * 1e6, need(8, "none"));
  r = run_ratchet(flags + std::to_string(mb8) + " --recompute blocks");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch-size auto: B=8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recompute blocks"), std::string::npos) << r.output;
  r = run_ratchet(flags + std::to_string(mb8));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("batch-size auto: B=8"), std::string::npos) << r.output;
  // nothing fits: a clear error
  r = run_ratchet(flags + "0.001");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("even B=1 needs"), std::string::npos) << r.output;
  // a bad policy names the flag
  r = run_ratchet(flags + std::to_string(mb) + " --recompute most");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--recompute 'most'"), std::string::npos) << r.output;
  // without a total, auto is refused
  r = run_ratchet("train --batch-size auto --train-data '" + (*dir_ / "data/train_*.h5") + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--batch-size auto needs --total-batch-tokens"), std::string::npos);
}

}  // namespace
