// RUN_DIR/ledger.json through nlohmann-json: every field reads back to the
// same double bit for bit, the documented field names and number types are
// kept, and a torn or foreign file reads as "no ledger" (the checkpoint's
// ledger is used then) instead of a half-filled one.
#include <gtest/gtest.h>

#include <string>

#include "train/ledger.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

TEST(LedgerJson, RoundTripsEveryFieldExactly) {
  TempDir d;
  Ledger l;
  l.wall_seconds = 1234.5678901234567;
  l.device_seconds = 8 * l.wall_seconds;
  l.tokens = 123456789012.0;
  l.cost = 0.1 + 0.2;  // not representable in a short decimal
  l.price_per_device_hour = 2.5;
  l.devices = 8;
  l.preemptions = 3;
  l.resumes = 2;
  l.steps_lost = 17;
  l.ckpt_save_seconds = 1e-7;
  l.data_wait_seconds = 3.25;
  l.step_seconds = 1000;
  l.max_step = 4242;
  l.state = 75;
  ASSERT_TRUE(l.write_json(d / "ledger.json"));
  const auto back = Ledger::read_json(d / "ledger.json");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->to_map(), l.to_map());

  const nlohmann::json j = read_json_file(d / "ledger.json");
  EXPECT_TRUE(j["max_step"].is_number_integer());  // integral values stay integers
  EXPECT_EQ(j["max_step"], 4242);
  EXPECT_EQ(j["state"], 75);
  EXPECT_EQ(j["device_hours"].get<double>(), l.device_hours());
  EXPECT_DOUBLE_EQ(j["data_stall_percent"].get<double>(), 0.325);
}

TEST(LedgerJson, TornOrForeignFilesReadAsNone) {
  TempDir d;
  Ledger l;
  l.tokens = 5;
  ASSERT_TRUE(l.write_json(d / "ledger.json"));
  const std::string text = read_file(d / "ledger.json");
  write_file(d / "torn.json", text.substr(0, text.size() / 2));
  EXPECT_FALSE(Ledger::read_json(d / "torn.json").has_value());
  write_file(d / "list.json", "[1, 2]");
  EXPECT_FALSE(Ledger::read_json(d / "list.json").has_value());
  write_file(d / "string.json", "{\"tokens\": \"many\"}");
  EXPECT_FALSE(Ledger::read_json(d / "string.json").has_value());
  EXPECT_FALSE(Ledger::read_json(d / "missing.json").has_value());
}

}  // namespace
