// `ratchet doctor RUN_DIR`: what the hang watchdog's flight records
// (train/watchdog.h, RUN_DIR/flight/rank_R.json) say happened, in one line,
// e.g. "rank 1 (rnode2) never entered all_reduce #5812 (its last record: step
// 411, phase step); rank 0 waited 63.0 s".
//
// The verdict compares collective sequence numbers across ranks: every rank
// enters the job's collectives in the same order (communicator.h), so the
// rank whose count stops short of the collective the others wait in is the
// one that never joined. A rank whose record says it was frozen (its monitor
// thread did not run: SIGSTOP, a hung node) is the culprit whatever it did
// after waking. A rank with no record is named as such.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace ratchet {

// The ranks a hang is blamed on, from the same records as flight_verdict:
// those that were frozen or never entered the collective the others waited
// in, or the one rank whose phase ran past its allowance with no collective
// pending. None when no record has a hang, or when every rank entered the
// collective (a network fault, not a node). `time` is the detecting rank's
// record time (Unix seconds): the same hang gives the same time.
struct FlightCulprit {
  int rank = -1;
  std::string host;
  int64_t time = 0;
};
std::vector<FlightCulprit> flight_culprits(const std::vector<OrderedJson>& records);

struct FlightDoctor {
  int records = 0;                   // records read
  std::vector<FlightCulprit> culprits;  // flight_culprits
  std::vector<std::string> damaged;  // "FILE: why", one per unreadable record
  std::string verdict;               // one line; "" when there are no records
};

// The verdict from parsed records (one JSON object per rank, any order).
std::string flight_verdict(const std::vector<OrderedJson>& records);

// Reads DIR/flight/rank_*.json (or DIR/rank_*.json when DIR is the flight
// folder itself). Damaged records are named in `damaged` and left out of the
// verdict. An Error when DIR does not exist.
FlightDoctor flight_doctor(const std::string& dir);

}  // namespace ratchet
