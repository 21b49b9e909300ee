// Search-space parsing and sampling, the journal (torn lines, versions) and
// the controller lock.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <string>

#include "core/error.h"
#include "sweep/journal.h"
#include "sweep/space.h"
#include "sweep/state.h"
#include "testing/test_util.h"

using namespace ratchet::sweep;
using ratchet::testing::TempDir;

namespace {

const std::vector<std::string> kKnown = {"lr", "warmup-steps", "weight-decay", "model", "steps"};
const std::vector<std::string> kReserved = {"steps"};

std::string error_of(const std::string& text) {
  try {
    parse_space(text, "space.ini", kKnown, kReserved);
  } catch (const ratchet::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(SweepSpace, ParsesEveryDistribution) {
  const Space s = parse_space(
      "# comment\nlr = loguniform(1e-4, 3e-3)\nwarmup-steps = int(0, 200)  ; trailing\n"
      "weight-decay = uniform(0, 0.2)\nmodel = choice(d4, d6)\n\n",
      "space.ini", kKnown, kReserved);
  ASSERT_EQ(s.params.size(), 4u);
  EXPECT_EQ(s.params[0].kind, Param::kLogUniform);
  EXPECT_DOUBLE_EQ(s.params[0].lo, 1e-4);
  EXPECT_DOUBLE_EQ(s.params[0].hi, 3e-3);
  EXPECT_EQ(s.params[1].kind, Param::kInt);
  EXPECT_EQ(s.params[2].kind, Param::kUniform);
  EXPECT_EQ(s.params[3].choices, (std::vector<std::string>{"d4", "d6"}));
}

TEST(SweepSpace, BadLinesAreNamed) {
  EXPECT_NE(error_of("lr = loguniform(1e-4)\n").find("space.ini line 1: loguniform(lo, hi) takes two"),
            std::string::npos);
  EXPECT_NE(error_of("\nfoo = choice(1)\n").find("space.ini line 2: 'foo' is not a `ratchet train` option"),
            std::string::npos);
  EXPECT_NE(error_of("steps = choice(1)\n").find("set by the sweep"), std::string::npos);
  EXPECT_NE(error_of("lr = uniform(2, 1)\n").find("needs lo <= hi"), std::string::npos);
  EXPECT_NE(error_of("lr = uniform(a, 1)\n").find("'a' is not a number"), std::string::npos);
  EXPECT_NE(error_of("lr 0.1\n").find("expected 'name = distribution(...)'"), std::string::npos);
  EXPECT_NE(error_of("lr = 0.1\n").find("is not a distribution"), std::string::npos);
  EXPECT_NE(error_of("warmup-steps = int(0.5, 3)\n").find("int(lo, hi) takes integers"), std::string::npos);
  EXPECT_NE(error_of("lr = choice(1)\nlr = choice(2)\n").find("given twice"), std::string::npos);
  EXPECT_NE(error_of("").find("defines no hyperparameter"), std::string::npos);
}

TEST(SweepSpace, SamplesStayInRangeAndRepeatWithTheSeed) {
  const Space s = parse_space("lr = loguniform(1e-4, 1e-2)\nwarmup-steps = int(0, 3)\n"
                              "weight-decay = uniform(0, 0.2)\nmodel = choice(d4, d6)\n",
                              "s", kKnown, kReserved);
  const auto a = sample_configs(s, 400, 7), b = sample_configs(s, 400, 7), c = sample_configs(s, 400, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<std::string> ints, models;
  int low_decade = 0;
  for (const auto& cfg : a) {
    const double lr = std::stod(cfg.at("lr"));
    EXPECT_GE(lr, 1e-4 * (1 - 1e-5));
    EXPECT_LE(lr, 1e-2 * (1 + 1e-5));
    low_decade += lr < 1e-3;
    const double wd = std::stod(cfg.at("weight-decay"));
    EXPECT_GE(wd, 0);
    EXPECT_LE(wd, 0.2);
    ints.insert(cfg.at("warmup-steps"));
    models.insert(cfg.at("model"));
  }
  EXPECT_EQ(ints, (std::set<std::string>{"0", "1", "2", "3"}));  // both ends reachable
  EXPECT_EQ(models, (std::set<std::string>{"d4", "d6"}));
  // log-uniform: half the draws in the lower decade (binomial, 400 draws: 5 sigma = 50)
  EXPECT_NEAR(low_decade, 200, 50);
}

TEST(SweepSpace, GridIsEveryCombination) {
  const Space s = parse_space("lr = choice(1, 2, 3)\nwarmup-steps = choice(0, 50, 200)\n"
                              "weight-decay = choice(0, 0.1, 0.2)\n", "s", kKnown, kReserved);
  const auto g = grid_configs(s);
  ASSERT_EQ(g.size(), 27u);
  std::set<Config> uniq(g.begin(), g.end());
  EXPECT_EQ(uniq.size(), 27u);
  EXPECT_EQ(g[0].at("lr"), "1");
  EXPECT_EQ(g[26].at("lr"), "3");  // the first parameter varies slowest
  EXPECT_EQ(g[1].at("weight-decay"), "0.1");
  const Space u = parse_space("lr = uniform(0, 1)\n", "s", kKnown, kReserved);
  EXPECT_THROW(grid_configs(u), ratchet::Error);
}

TEST(SweepJournal, TornLastLineIsIgnoredAndCut) {
  TempDir d;
  const std::string path = d / "journal.jsonl";
  {
    Journal j(path);
    j.append({{"event", "init"}, {"format", kJournalFormat}, {"version", kJournalVersion}});
    j.append({{"event", "created"}, {"trial", 0}, {"config", {{"lr", "1"}}}});
  }
  {
    std::ofstream out(path, std::ios::app);
    out << "{\"event\": \"created\", \"tri";  // a write cut by a kill
  }
  EXPECT_EQ(Journal::read(path).size(), 2u);
  {
    Journal j(path);  // cuts the torn tail, then appends whole lines
    j.append({{"event", "created"}, {"trial", 1}, {"config", {{"lr", "2"}}}});
  }
  const auto ev = Journal::read(path);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2]["trial"], 1);
  EXPECT_EQ(ev[2]["seq"], 3);
  const SweepState s = replay(d.path, ev);
  ASSERT_EQ(s.trials.size(), 2u);
  EXPECT_EQ(s.trials[1].config.at("lr"), "2");
}

TEST(SweepJournal, OtherVersionsAndNonSweepsAreRefused) {
  TempDir d;
  const std::string path = d / "journal.jsonl";
  {
    Journal j(path);
    j.append({{"event", "init"}, {"format", kJournalFormat}, {"version", kJournalVersion + 1}});
  }
  try {
    Journal::read(path);
    FAIL() << "no error";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("journal version 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Journal::read(d / "missing.jsonl"), ratchet::Error);
}

TEST(SweepJournal, OneControllerPerDirectory) {
  TempDir d;
  ControllerLock a(d.path);
  try {
    ControllerLock b(d.path);  // flock is per open file description: refused here too
    FAIL() << "second lock taken";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("already run by another controller (host "), std::string::npos)
        << e.what();
  }
}

}  // namespace
