// What a checkpoint saves and restores: the trainer's objects, by reference
// (train/checkpoint_session.h and the parts it is made of).
#pragma once
#include <map>
#include <string>

#include "backend/backend.h"
#include "data/loader.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "train/run_ledger.h"
#include "train/stop_policy.h"

namespace ratchet {

struct TrainState {
  Backend& be;
  GPT& model;
  DistributedStrategy& dp;
  DataLoader& loader;
  RunLedger& ledger;
  EarlyStop& early;
  int& step;  // optimizer steps completed
  // What must match for a resume to continue the same run, and what may
  // change (logged when it does).
  std::map<std::string, std::string> identity, settings;
};

}  // namespace ratchet
