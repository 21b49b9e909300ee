// Goodput in `ratchet report` and `ratchet plan` (report/goodput_report.h,
// report/spend_by_tag.h, plan/plan.h's measured goodput): the text and the
// plot name every cause, --by-tag sums the breakdowns of the runs of a tag,
// and the plan's measured cost follows the ledger's goodput.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "plan/plan.h"
#include "report/goodput_report.h"
#include "report/spend_by_tag.h"
#include "train/ledger.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// A run of 100 device-seconds: 60 productive, 10 saving, 10 lost, 20 of gap
// (so 80 billed).
Ledger run_ledger(const std::string& tag) {
  Ledger l;
  l.devices = 2;
  l.wall_seconds = 40;
  l.device_seconds = 80;
  l.part(Cause::Productive) = 60;
  l.part(Cause::CkptSave) = 10;
  l.part(Cause::LostProgress) = 10;
  l.part(Cause::RequeueGap) = 20;
  l.device_seconds = 80;
  l.set_tags({tag});
  return l;
}

TEST(GoodputReport, TextJsonAndPlotNameEveryCause) {
  const Breakdown b = run_ledger("a=1").breakdown();
  EXPECT_DOUBLE_EQ(b.whole, 100);
  EXPECT_DOUBLE_EQ(b.goodput(), 0.6);
  EXPECT_DOUBLE_EQ(b.part[kCauses], 0);
  const std::string text = report::format_breakdown(b, "");
  EXPECT_NE(text.find("goodput 60.0%"), std::string::npos) << text;
  const std::string script = report::goodput_plot_script(b, "t", "/tmp/x.png", "/tmp/x.svg");
  const OrderedJson j = report::breakdown_json(b);
  for (int c = 0; c <= kCauses; c++) {
    EXPECT_NE(text.find(cause_name(c)), std::string::npos) << cause_name(c);
    EXPECT_NE(script.find(std::string(cause_name(c)) + " "), std::string::npos) << cause_name(c);
    EXPECT_TRUE(j["device_seconds"].contains(cause_name(c))) << cause_name(c);
  }
  const size_t lost = text.find("lost_progress");
  ASSERT_NE(lost, std::string::npos);
  const std::string line = text.substr(lost, text.find('\n', lost) - lost);
  EXPECT_NE(line.find("0.002778 device-hours"), std::string::npos) << line;  // 10 s
  EXPECT_NE(line.find("10.0%"), std::string::npos) << line;
  EXPECT_DOUBLE_EQ(j["goodput"].get<double>(), 0.6);
}

TEST(GoodputReport, ByTagSumsTheBreakdownsOfEachTagsRuns) {
  TempDir d;
  std::filesystem::create_directories(d / "r1");
  std::filesystem::create_directories(d / "r2");
  std::filesystem::create_directories(d / "r3");
  ASSERT_TRUE(run_ledger("sweep=s").write_json(d / "r1/ledger.json"));
  Ledger two = run_ledger("sweep=s");
  two.part(Cause::Productive) = 20;  // 40 of its 100 now "other"
  ASSERT_TRUE(two.write_json(d / "r2/ledger.json"));
  // Not the trainer's: counted for spend, no breakdown.
  write_file(d / "r3/ledger.json", R"({"device_hours": 1, "cost": 2, "tag.sweep": "s"})");
  const report::SpendByTag s = report::spend_by_tag(d.path);
  ASSERT_EQ(s.runs, 3);
  const Breakdown& t = s.by_tag.at("sweep=s").goodput;
  EXPECT_DOUBLE_EQ(t.whole, 200);
  EXPECT_DOUBLE_EQ(t.part[(int)Cause::Productive], 80);
  EXPECT_DOUBLE_EQ(t.part[kCauses], 40);
  EXPECT_DOUBLE_EQ(t.goodput(), 0.4);
  const std::string out = report::format_spend_by_tag(s);
  EXPECT_NE(out.find("40.0%"), std::string::npos) << out;
  EXPECT_NE(out.find("all runs, by cause: goodput 40.0%"), std::string::npos) << out;
}

TEST(GoodputPlan, MeasuredCostFollowsTheLedgersGoodput) {
  TempDir d;
  ASSERT_TRUE(run_ledger("a=1").write_json(d / "ledger.json"));
  const plan::MeasuredGoodput g = plan::read_measured_goodput(d.path);
  EXPECT_DOUBLE_EQ(g.goodput, 0.6);
  EXPECT_DOUBLE_EQ(g.billed, 0.75);  // the gap is not billed
  const plan::CostEstimate c = plan::measured_cost(3.0, 4, 2.0, g);
  EXPECT_DOUBLE_EQ(c.wall_hours, 5.0);
  EXPECT_DOUBLE_EQ(c.device_hours, 16.0);
  EXPECT_DOUBLE_EQ(c.cost, 32.0);

  // No ledger, or no productive time: errors naming the flag.
  try {
    plan::read_measured_goodput(d / "none");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--goodput-from"), std::string::npos) << e.what();
  }
  Ledger empty;
  ASSERT_TRUE(empty.write_json(d / "ledger.json"));
  try {
    plan::read_measured_goodput(d.path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no productive step time"), std::string::npos) << e.what();
  }
}

}  // namespace
