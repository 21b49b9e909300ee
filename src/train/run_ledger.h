// The cost ledger (train/ledger.h) as a run keeps it: the loop adds tokens and
// step times to it directly; record_time_and_write() adds the wall and device
// time since its last call and rewrites RUN_DIR/ledger.json (rank 0); on
// resume it is merged with the checkpoint's copy and ledger.json.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "train/ledger.h"

namespace ratchet {

// Ledger::state values besides the exit codes 75 and 76.
constexpr double kLedgerRunning = 0, kLedgerDone = 1, kLedgerFailed = 2;

class RunLedger {
 public:
  // path: ledger.json ("" on ranks other than 0, or without --run-dir/--ckpt-dir).
  RunLedger(std::string path, double price_per_device_hour, int devices);

  Ledger* operator->() { return &l_; }
  const Ledger& get() const { return l_; }

  // Adds the wall time since the last call to wall and device time and cost,
  // raises max_step to `step`, and rewrites ledger.json (a few hundred bytes
  // and a rename: cheap next to a step). A failed write warns once; the run
  // goes on (checkpoints keep the ledger too).
  void record_time_and_write(int step);

  // A resume from the checkpoint at `ckpt_step` whose counters are given: the
  // checkpoint covers spend up to it, ledger.json also what came after (until a
  // kill or a clean stop). Takes the later one, and counts the attempt that
  // ended and the steps it loses. Returns the steps lost.
  double merge_after_resume(const std::map<std::string, double>& ckpt_counters,
                            int64_t ckpt_step);

 private:
  Ledger l_;
  std::string path_;
  double last_record_s_;
  bool write_warned_ = false;
};

}  // namespace ratchet
