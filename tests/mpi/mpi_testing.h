// Helpers for the mpi tests: launching the ratchet binary under mpirun with
// the settings this machine needs, and reading what a run leaves behind.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
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

// Two runs' logs (out/log.jsonl) and exports (out/out.bin) compared: the
// largest relative loss difference, the largest parameter difference, and
// whether both files are the same bytes.
struct RunDiff {
  double loss = 0, param = 0;
  bool bitwise = false;
};
inline RunDiff diff_runs(const std::string& a, const std::string& b) {
  RunDiff d;
  auto la = read_losses(a + "/log.jsonl"), lb = read_losses(b + "/log.jsonl");
  EXPECT_EQ(la.size(), lb.size()) << a << " " << b;
  EXPECT_FALSE(la.empty());
  for (size_t i = 0; i < std::min(la.size(), lb.size()); i++)
    d.loss = std::max(d.loss, std::fabs(la[i] - lb[i]) / std::fabs(la[i]));
  auto pa = read_export(a + "/out.bin"), pb = read_export(b + "/out.bin");
  EXPECT_EQ(pa.size(), pb.size());
  EXPECT_FALSE(pa.empty());
  if (pa.size() == pb.size()) d.param = max_abs_diff(pa.data(), pb.data(), pa.size());
  d.bitwise = !pa.empty() && read_file(a + "/out.bin") == read_file(b + "/out.bin") && la == lb;
  return d;
}

// The tiny run of the ZeRO tests through the cuda backend on the CPU
// (ratchet-simt --device simt): 2 layers, 16 channels, T=16, B rows per rank,
// `total` tokens per step, 8 steps, evaluation every 4 over `eval_batches`.
inline std::string simt_train_args(const std::string& base, int B, int total, const std::string& out,
                                   int eval_batches = 6) {
  return "train --device simt --model custom --layers 2 --heads 2 --channels 16 --max-seq-len 32 "
         "--seq-len 16 --batch-size " + std::to_string(B) + " --total-batch-tokens " +
         std::to_string(total) + " --threads 1 --train-data '" + base + "/data/train_*.h5' "
         "--val-data '" + base + "/data/val_*.h5' --eval-every 4 --eval-batches " +
         std::to_string(eval_batches) + " --warmup-steps 2 --steps 8 --lr 3e-3 --quiet --log-jsonl " +
         out + "/log.jsonl --export " + out + "/out.bin";
}

}  // namespace ratchet::testing
