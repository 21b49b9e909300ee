// Search-space parsing and sampling, the journal (torn lines, versions) and
// the controller lock.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// Hostile spaces: each was a crash or a silently wrong trial before.
TEST(SweepSpace, EmptyChoiceOutOfRangeIntsAndBomAreHandled) {
  // choice() used to index an empty list (segfault when sampled).
  EXPECT_NE(error_of("lr = choice()\n").find("space.ini line 1: choice() lists no value"), std::string::npos);
  EXPECT_NE(error_of("warmup-steps = int(0, 1e10)\n").find("beyond +-2^31"), std::string::npos);
  // A UTF-8 byte-order mark (Windows editors) is not part of the first name.
  const Space s = parse_space("\xEF\xBB\xBFlr = choice(1, 2)\r\nmodel = choice(d4)\r\n", "s", kKnown, kReserved);
  ASSERT_EQ(s.params.size(), 2u);
  EXPECT_EQ(s.params[0].name, "lr");
  EXPECT_EQ(s.params[1].choices, (std::vector<std::string>{"d4"}));  // CRLF: no '\r' in values
}

TEST(SweepSpace, SampledValuesAreWhatTheTrainerReads) {
  const Space s = parse_space("warmup-steps = int(0, 100000000)\nlr = uniform(1.0000001, 1.0000002)\n"
                              "weight-decay = uniform(-1e308, 1e308)\nmodel = choice(d4)\n",
                              "s", {"warmup-steps", "lr", "weight-decay", "model"}, {});
  std::set<std::string> lrs;
  for (const auto& c : sample_configs(s, 50, 3)) {
    // Ints as digits: "%.6g" made 13640703 into "1.36407e+07", which no int option parses.
    const std::string w = c.at("warmup-steps");
    EXPECT_EQ(w.find_first_not_of("0123456789"), std::string::npos) << w;
    EXPECT_LE(std::stoll(w), 100000000);
    // A narrow range keeps its digits (6 significant made every value "1").
    const double lr = std::stod(c.at("lr"));
    EXPECT_GE(lr, 1.0000001);
    EXPECT_LE(lr, 1.0000002);
    lrs.insert(c.at("lr"));
    // lo + u (hi - lo) overflowed to "inf".
    EXPECT_TRUE(std::isfinite(std::stod(c.at("weight-decay")))) << c.at("weight-decay");
  }
  EXPECT_GT(lrs.size(), 40u);  // 50 draws, essentially all distinct
  // A degenerate range gives exactly its value; ordinary ranges 6 digits.
  const Space t = parse_space("lr = uniform(1e-3, 1e-3)\nweight-decay = loguniform(1e-4, 3e-3)\n", "s",
                              kKnown, kReserved);
  const Config c = sample_configs(t, 1, 1)[0];
  EXPECT_EQ(c.at("lr"), "0.001");
  EXPECT_LE(c.at("weight-decay").size(), 11u) << c.at("weight-decay");  // "0.000159034"
}

TEST(SweepSpace, AHugeGridIsRefusedBeforeItIsBuilt) {
  std::string v;
  for (int i = 1; i <= 1000; i++) v += (i > 1 ? "," : "") + std::to_string(i);
  const Space s = parse_space("lr = choice(" + v + ")\nwarmup-steps = choice(" + v + ")\nweight-decay = choice(" +
                              v + ")\n", "s", kKnown, kReserved);
  try {
    grid_configs(s);  // 10^9 configurations: gigabytes before, an error now
    FAIL() << "no error";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1e+09 combinations, more than 10000"), std::string::npos) << e.what();
  }
}

// `sweep init` writes its journal in one go: a kill or a full disk midway
// leaves no sweep with some of its trials missing.
TEST(SweepJournal, CreateIsAllOrNothing) {
  TempDir d;
  const std::string path = d / "journal.jsonl";
  Journal::create(path, {{{"event", "init"}, {"format", kJournalFormat}, {"version", kJournalVersion}},
                         {{"event", "created"}, {"trial", 0}, {"config", {{"lr", "1"}}}}});
  const auto ev = Journal::read(path);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1]["seq"], 2);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path), {}), 1);  // no temporary left
  // never over an existing journal (two inits racing: the second is refused)
  try {
    Journal::create(path, {{{"event", "init"}}});
    FAIL() << "replaced";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists: another `ratchet sweep init` made it first"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(Journal::read(path).size(), 2u);
  EXPECT_THROW(Journal::create(d / "no/such/dir.jsonl", {{{"event", "init"}}}), ratchet::Error);
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

// A record from a newer ratchet used to be skipped silently (a decision lost);
// a record missing a field said only "key 'trial' not found".
TEST(SweepJournal, UnknownAndMalformedRecordsAreNamed) {
  const nlohmann::json init = {{"event", "init"}, {"format", kJournalFormat}, {"version", kJournalVersion}};
  const nlohmann::json created = {{"event", "created"}, {"trial", 0}, {"config", {{"lr", "1"}}}};
  auto error_of = [](const std::vector<nlohmann::json>& ev) -> std::string {
    try {
      replay("D", ev);
    } catch (const ratchet::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of({init, created}), "no error");
  EXPECT_NE(error_of({init, created, {{"event", "retried"}, {"trial", 0}}})
                .find("D/journal.jsonl line 3 has event 'retried' this ratchet does not know"),
            std::string::npos);
  EXPECT_NE(error_of({init, created, {{"event", "result"}, {"rung", 0}}})
                .find("D/journal.jsonl line 3 (result): "), std::string::npos);
  EXPECT_NE(error_of({init, {{"event", "created"}, {"trial", 4}, {"config", {{"lr", "1"}}}}})
                .find("creates trial 4 where trial 0 comes next"), std::string::npos);
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
