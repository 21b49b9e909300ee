// Helpers for the mpi tests: launching the ratchet binary under mpirun with
// the settings this machine needs, and reading what a run leaves behind.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace ratchet::testing {

// mpirun as root, more ranks than cores (4 ranks on 2 cores), ranks that
// yield the CPU while they wait, no single-copy warning in containers.
inline std::string mpirun_prefix(int ranks, const std::string& env = "") {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 "
         "OMPI_MCA_btl_vader_single_copy_mechanism=none " +
         env + " mpirun -np " + std::to_string(ranks) + " --bind-to none ";
}

// Runs `mpirun -np N ratchet ARGS`; `env` is "VAR=value ..." for every rank.
inline RunResult mpirun_ratchet(int ranks, const std::string& args, const std::string& env = "") {
  return run_shell(mpirun_prefix(ranks, env) + RATCHET_EXE " " + args);
}

// The parameters of an llm.c checkpoint written by --export (256-int header).
inline std::vector<float> read_export(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<float> p;
  if (bytes.size() < 1024) return p;
  p.resize((bytes.size() - 1024) / 4);
  std::memcpy(p.data(), bytes.data() + 1024, p.size() * 4);
  return p;
}

// The training losses of a --log-jsonl file, in order (evaluation lines skipped).
inline std::vector<double> read_losses(const std::string& path) {
  return jsonl_values(path, "loss");
}

}  // namespace ratchet::testing
