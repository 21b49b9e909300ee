// Tokens per --train-data source in the ledger (train/ledger.h): kept through
// ledger.json and through a checkpoint's counters (INI "key = value" lines,
// where a glob with '=', '%' or a line end must survive), and ledgers written
// before mixtures still load (without the field).
#include <gtest/gtest.h>

#include <string>

#include "ckpt/checkpoint.h"
#include "train/ledger.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

TEST(MixtureLedger, TokensBySourceRoundTripThroughJsonAndCounters) {
  TempDir d;
  Ledger l;
  l.tokens = 1000;
  l.tokens_by_source = {{"web/*.h5", 700}, {"odd = name %41/x.h5", 250}, {"line\nend", 50}};
  ASSERT_TRUE(l.write_json(d / "ledger.json"));
  const auto back = Ledger::read_json(d / "ledger.json");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->tokens_by_source, l.tokens_by_source);
  const nlohmann::json j = read_json_file(d / "ledger.json");
  EXPECT_EQ(j["tokens_by_source"]["web/*.h5"].get<double>(), 700);

  // Through the counters' INI text, as a checkpoint stores them.
  std::map<std::string, std::string> ini;
  for (const auto& [k, v] : l.to_map()) ini[k] = std::to_string(v);
  std::map<std::string, double> counters;
  for (const auto& [k, v] : from_ini(to_ini(ini))) counters[k] = std::stod(v);
  EXPECT_EQ(Ledger::from_map(counters).tokens_by_source, l.tokens_by_source);
}

TEST(MixtureLedger, LedgersWithoutTheFieldLoadAndBadOnesAreRefused) {
  TempDir d;
  write_file(d / "old.json", R"({"wall_seconds": 5, "tokens": 64, "state": 1})");
  const auto old = Ledger::read_json(d / "old.json");
  ASSERT_TRUE(old.has_value());
  EXPECT_TRUE(old->tokens_by_source.empty());
  EXPECT_EQ(old->tokens, 64);
  EXPECT_TRUE(Ledger::from_map({{"ledger.tokens", 64}}).tokens_by_source.empty());
  // A single-source ledger writes no field (its JSON is as before mixtures).
  Ledger one;
  ASSERT_TRUE(one.write_json(d / "one.json"));
  EXPECT_FALSE(read_json_file(d / "one.json").contains("tokens_by_source"));
  // A foreign value reads as "no ledger" (the checkpoint's stands), as for other fields.
  write_file(d / "bad.json", R"({"tokens": 64, "tokens_by_source": {"a": "many"}})");
  EXPECT_FALSE(Ledger::read_json(d / "bad.json").has_value());
}
