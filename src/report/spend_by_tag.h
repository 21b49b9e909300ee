// `ratchet report DIR --by-tag`: spend summed per ledger tag over a directory
// of runs. Every ledger.json below DIR counts once; its "tag.KEY": "VALUE"
// labels (train --tag, sweep and trial ids, Slurm job and account) each get
// the run's device-hours and cost, and its goodput breakdown (train/ledger.h:
// the device-seconds by cause, summed; an older ledger's estimated).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "train/ledger.h"

namespace ratchet::report {

struct TagSpend {
  int runs = 0;
  double device_hours = 0, cost = 0;
  Breakdown goodput;  // summed over the runs with a trainer's ledger
};

struct SpendByTag {
  int runs = 0;                               // ledgers found
  double device_hours = 0, cost = 0;          // over all of them
  Breakdown goodput;                          // over all of them
  std::map<std::string, TagSpend> by_tag;     // "key=value" -> spend
  std::vector<std::string> skipped;           // "LEDGER: why" for each one not counted
};

// Every ledger.json below DIR, except those that cannot be counted (not a
// JSON object, device_hours or cost negative, above 1e12, or not a number):
// skipped, each named in `skipped`, so one foreign file does not hide the
// spend of all the others, nor subtract from it. Error naming DIR if it holds
// no countable ledger.json.
SpendByTag spend_by_tag(const std::string& dir);
std::string format_spend_by_tag(const SpendByTag& s);

}  // namespace ratchet::report
