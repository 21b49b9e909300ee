// `ratchet doctor`'s verdict (src/report/flight_doctor.h) from synthetic
// flight records: the rank that never entered the collective the others
// waited in, every rank stuck in it, a phase hang, a run that ended, a
// missing rank, and damaged records named rather than crashing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "report/flight_doctor.h"

namespace ratchet {
namespace {

OrderedJson record(int rank, const std::string& host, uint64_t entered, const std::string& phase,
                   int step, bool hang, int world = 2) {
  OrderedJson j;
  j["format"] = "ratchet-flight-record/1";
  j["host"] = host;
  j["rank"] = rank;
  j["world"] = world;
  j["phase"] = phase;
  j["step"] = step;
  j["entered"] = entered;
  OrderedJson cs = OrderedJson::array();
  for (uint64_t s = entered > 2 ? entered - 2 : 1; s <= entered; s++) {
    OrderedJson c;
    c["seq"] = s;
    c["op"] = "all_reduce";
    c["bytes"] = 64;
    const bool open = hang && s == entered;
    c["state"] = open ? "in_flight" : "done";
    c["age_s"] = open ? 63.0 : 70.0;
    cs.push_back(c);
  }
  j["collectives"] = cs;
  j["hang"] = hang ? OrderedJson{{"reason", "all_reduce in flight"}, {"age_s", 63.0}} : nullptr;
  return j;
}

TEST(FlightDoctor, NamesTheRankThatNeverEntered) {
  const std::string v = flight_verdict({record(0, "n1", 5812, "step", 411, true),
                                        record(1, "n2", 5811, "step", 411, false)});
  EXPECT_NE(v.find("rank 1 (n2) never entered all_reduce #5812"), std::string::npos) << v;
  EXPECT_NE(v.find("step 411, phase step"), std::string::npos) << v;
  EXPECT_NE(v.find("rank 0 waited 63.0 s"), std::string::npos) << v;
}

TEST(FlightDoctor, EveryRankInTheCollectiveIsNotOneRanksFault) {
  const std::string v = flight_verdict({record(0, "n1", 9, "step", 3, true),
                                        record(1, "n2", 9, "step", 3, true)});
  EXPECT_NE(v.find("every rank entered all_reduce #9"), std::string::npos) << v;
  EXPECT_NE(v.find("ranks 0, 1 waited"), std::string::npos) << v;
}

// A rank stopped (SIGSTOP) and continued by the job's kill: it finished the
// collective and entered the next, but its record says it was frozen.
TEST(FlightDoctor, AFrozenRankIsTheCulpritWhateverItDidAfterWaking) {
  OrderedJson r1 = record(1, "n2", 171, "step", 2, true);
  r1["frozen_s"] = 1.1;
  const std::string v = flight_verdict({record(0, "n1", 170, "step", 2, true), r1});
  EXPECT_NE(v.find("rank 1 (n2) was frozen for 1.1 s"), std::string::npos) << v;
  EXPECT_NE(v.find("rank 0 waited 63.0 s in all_reduce #170"), std::string::npos) << v;
}

TEST(FlightDoctor, APhaseHangAndAMissingRank) {
  OrderedJson r0 = record(0, "n1", 4, "save", 10, false, 3);
  r0["hang"] = {{"reason", "phase save (step 10) for 700.0 s"}};
  const std::string v = flight_verdict({r0, record(1, "n2", 4, "step", 10, false, 3)});
  EXPECT_NE(v.find("rank 0 (n1) hung in step 10, phase save"), std::string::npos) << v;
  EXPECT_NE(v.find("no record from rank 2"), std::string::npos) << v;
}

TEST(FlightDoctor, ARunThatEndedAndNoRecords) {
  EXPECT_EQ(flight_verdict({record(0, "n1", 4, "done", 10, false),
                            record(1, "n2", 4, "done", 10, false)}),
            "no hang: every rank's last record says the run ended");
  EXPECT_EQ(flight_verdict({}), "");
}

TEST(FlightDoctor, ReadsTheFolderAndNamesDamagedRecords) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("doctor_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "flight");
  std::ofstream(dir / "flight" / "rank_0.json") << record(0, "n1", 7, "step", 2, true).dump();
  std::ofstream(dir / "flight" / "rank_1.json") << "{\"format\": \"ratchet-fli";  // cut short
  std::ofstream(dir / "flight" / "rank_2.json") << "[1, 2]";                       // not a record
  const FlightDoctor d = flight_doctor(dir.string());
  EXPECT_EQ(d.records, 1);
  ASSERT_EQ(d.damaged.size(), 2u);
  EXPECT_NE(d.damaged[0].find("rank_1.json: not valid JSON"), std::string::npos) << d.damaged[0];
  EXPECT_NE(d.damaged[1].find("rank_2.json: not a ratchet flight record"), std::string::npos);
  // Rank 1's record is unreadable: it is the one with no record, never joined.
  EXPECT_NE(d.verdict.find("rank 1 left no record and never joined all_reduce #7"),
            std::string::npos)
      << d.verdict;
  fs::create_directories(dir / "empty");
  const FlightDoctor empty = flight_doctor((dir / "empty").string());
  EXPECT_EQ(empty.records, 0);  // no records: said by the command, not an error
  EXPECT_TRUE(empty.damaged.empty());
  EXPECT_THROW(flight_doctor((dir / "nope").string()), std::exception);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ratchet
