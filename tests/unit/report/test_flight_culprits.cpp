// Which node a hang is blamed on (flight_culprits, src/report/flight_doctor.h),
// the input of the node exclusion: the rank that never entered, a frozen
// rank, the one rank whose phase hung; nobody for a network fault (every
// rank in the collective), for several ranks stuck in a phase (a shared file
// system) or for a run without a hang.
#include <gtest/gtest.h>

#include "report/flight_doctor.h"

namespace ratchet {
namespace {

OrderedJson record(int rank, const std::string& host, uint64_t entered, bool hang,
                   int64_t time = 1000) {
  OrderedJson j;
  j["format"] = "ratchet-flight-record/1";
  j["host"] = host;
  j["rank"] = rank;
  j["world"] = 3;
  j["time"] = time;
  j["phase"] = "step";
  j["step"] = 7;
  j["entered"] = entered;
  OrderedJson c;
  c["seq"] = entered;
  c["op"] = "all_reduce";
  c["state"] = hang ? "in_flight" : "done";
  c["age_s"] = 63.0;
  j["collectives"] = OrderedJson::array({c});
  j["hang"] = hang ? OrderedJson{{"reason", "all_reduce in flight"}} : OrderedJson(nullptr);
  return j;
}

TEST(FlightCulprits, TheRankThatNeverEnteredWithTheDetectorsTime) {
  const auto c = flight_culprits({record(0, "n1", 50, true, 1234), record(1, "n2", 49, false, 1200),
                                  record(2, "n3", 50, true, 1240)});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].rank, 1);
  EXPECT_EQ(c[0].host, "n2");
  EXPECT_EQ(c[0].time, 1234);  // the record of the rank that saw the hang first
}

TEST(FlightCulprits, AFrozenRank) {
  OrderedJson r1 = record(1, "n2", 51, true);
  r1["frozen_s"] = 2.5;
  const auto c = flight_culprits({record(0, "n1", 50, true), r1});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].host, "n2");
}

TEST(FlightCulprits, OneRanksPhaseHangButNotEveryRanks) {
  OrderedJson r0 = record(0, "n1", 50, false);
  r0["hang"] = {{"reason", "phase save (step 7) for 700.0 s"}};
  auto c = flight_culprits({r0, record(1, "n2", 50, false)});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].host, "n1");
  OrderedJson r1 = r0;
  r1["rank"] = 1;
  r1["host"] = "n2";
  EXPECT_TRUE(flight_culprits({r0, r1}).empty());  // every rank's save: the file system
}

TEST(FlightCulprits, NobodyForANetworkFaultOrNoHang) {
  EXPECT_TRUE(flight_culprits({record(0, "n1", 50, true), record(1, "n2", 50, true)}).empty());
  EXPECT_TRUE(flight_culprits({record(0, "n1", 50, false), record(1, "n2", 49, false)}).empty());
  EXPECT_TRUE(flight_culprits({}).empty());
}

}  // namespace
}  // namespace ratchet
