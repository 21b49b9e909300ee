// What the `ratchet sweep` tests share: the fake trainer
// (integration/sweep_fake_trainer.sh: a synthetic learning curve best at
// lr 3e-3, one device-second per step), a nine-point space over it, and
// readers of a sweep directory's journal and of a trial's invocation log.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace ratchet::testing {

inline const std::string kFakeTrainer =
    std::string("bash ") + RATCHET_TESTS_DIR + "/integration/sweep_fake_trainer.sh";

// Nine learning rates; the fake curve is best at 0.003.
inline const char* const kSpace9 = "lr = choice(1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 3e-2)\n";

// DIR/journal.jsonl, one object a line.
inline std::vector<nlohmann::json> journal(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/journal.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The steps of each time the fake trainer ran for TRIAL, one a line ("" if never).
inline std::string invocations(const std::string& dir, int trial) {
  char name[32];
  std::snprintf(name, sizeof name, "/trials/t%04d/invocations", trial);
  return std::filesystem::exists(dir + name) ? read_file(dir + name) : "";
}

}  // namespace ratchet::testing
