// `mpirun -np N ratchet eval`: the examples and data batches split over the
// ranks (example i on rank i mod N) and the sums all-reduced give the numbers
// of one process, on 2 and 3 ranks, printed once.
#include <gtest/gtest.h>

#include "data_tools/shard_writer.h"
#include "model/llmc_checkpoint.h"
#include "mpi_testing.h"
#include "testing/reference_output.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

TEST(MpiEval, RanksSplitTheExamplesAndAgreeWithOneProcess) {
  TempDir d;
  const GPTConfig c = tiny_config(2, 2, 32, 257, 64);
  save_llmc_checkpoint(d / "m.bin", c, reference_params(c));
  std::vector<uint32_t> toks;
  for (int i = 0; i < 2000; i++) toks.push_back((uint32_t)((i * 31 + i / 5) % 256));
  write_shard(d / "val_000.h5", ShardMeta{"byte", 257, 256}, toks, {0});
  const std::string tasks = RATCHET_TESTS_DIR "/data/eval/";
  auto args = [&](const std::string& out) {
    return "eval --init-from " + (d / "m.bin") + " --tokenizer byte --task hs=" + tasks +
           "hellaswag_tiny.jsonl --task gen=" + tasks + "generic_tiny.jsonl --data val='" +
           (d / "val_*.h5") + "' --seq-len 48 --batch-size 5 --threads 1 --json > " + out;
  };
  auto one = run_shell("(" RATCHET_EXE " " + args(d / "one.json") + ")");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto j1 = read_json_file(d / "one.json");
  for (int n : {2, 3}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    const std::string out = d / ("np" + std::to_string(n) + ".json");
    auto r = run_shell("(" + mpirun_prefix(n) + RATCHET_EXE " " + args(out) + ")");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // One object, from rank 0 only.
    EXPECT_EQ(read_file(out).find('\n'), read_file(out).size() - 1) << read_file(out);
    const auto jn = read_json_file(out);
    for (const char* t : {"hs", "gen"}) {
      for (const char* k : {"n", "truncated", "tokens", "acc", "acc_norm", "acc_token_mean", "acc_se"})
        EXPECT_EQ(jn["tasks"][t][k], j1["tasks"][t][k]) << t << " " << k;
    }
    EXPECT_EQ(jn["data"]["val"]["tokens"], j1["data"]["val"]["tokens"]);
    // The same per-batch losses, summed in another order.
    EXPECT_NEAR(jn["data"]["val"]["loss"].get<double>(), j1["data"]["val"]["loss"].get<double>(), 1e-9);
  }
  auto per = run_shell(mpirun_prefix(2) + RATCHET_EXE " eval --init-from " + (d / "m.bin") +
                       " --task hs=" + tasks + "hellaswag_tiny.jsonl --per-example " + (d / "p.jsonl"));
  EXPECT_NE(per.exit_code, 0);
  EXPECT_NE(per.output.find("--per-example"), std::string::npos) << per.output;
}

}  // namespace
