// `ratchet plan` through the real binary: the table, the JSON figures for
// hand-checked cases, budgets, INI files shared with `ratchet train`, and bad
// input (exit code 2 with the flag named).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <string>

#include "testing/test_util.h"

using namespace ratchet::testing;

namespace {

// The number under `key` in the object `section` of plan's JSON (at the top
// level or inside one of its objects, e.g. "memory" / "activations_bytes").
double json_number(const std::string& json, const std::string& section, const std::string& key) {
  const nlohmann::json j = nlohmann::json::parse(json);
  const nlohmann::json* sec = j.contains(section) ? &j[section] : nullptr;
  for (const auto& [name, v] : j.items())
    if (!sec && v.is_object() && v.contains(section)) sec = &v[section];
  if (!sec || !sec->contains(key) || !(*sec)[key].is_number()) return NAN;
  return (*sec)[key].get<double>();
}

// The string `key` in the object `section` of plan's JSON.
std::string json_string(const std::string& json, const std::string& section,
                        const std::string& key) {
  const nlohmann::json j = nlohmann::json::parse(json);
  if (!j.contains(section) || !j[section].contains(key) || !j[section][key].is_string()) return "";
  return j[section][key].get<std::string>();
}

void expect_usage_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "message lacks '" << needle << "':\n"
                                                      << r.output;
}

TEST(PlanCli, TablePrintsEverySection) {
  auto r = run_ratchet("plan --model d12 --device h100 --world-size 8 --batch-size 16 "
                       "--seq-len 1024 --link-gbps 400");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"124.48M parameters (124,475,904)", "compute-optimal", "nearest preset d12",
                        "memory per rank", "ZeRO-1 over 8", "master weights (fp32)", "gelu+ln",
                        "blocks", "all-reduce", "data-parallel efficiency", "Young/Daly",
                        "on-demand", "spot", "expected preemptions", "cost"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
}

// A GPU plan keeps the device memory reserve out of "fits", as `ratchet
// train` keeps it out of its arena (model/memory.h): 5% of 80 GB = 4 GB on an
// H100, shown as its own line and in the JSON; a CPU plan has none.
TEST(PlanCli, GpuPlanShowsTheMemoryReserve) {
  auto r = run_ratchet("plan --model d12 --device h100 -B 8 -T 1024");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kept free (CUDA, cuBLASLt, NCCL)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fits 76 GB"), std::string::npos) << r.output;
  r = run_ratchet("plan --model d12 --device h100 -B 8 -T 1024 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_DOUBLE_EQ(json_number(r.output, "device", "memory_reserve_bytes"), 4e9);
  r = run_ratchet("plan --model d12 --device cpu -B 8 -T 1024 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_DOUBLE_EQ(json_number(r.output, "device", "memory_reserve_bytes"), 0.0);
}

// blocks:k is listed next to the standard policies, marked as used, and its
// JSON figures are the model's accounting (d12 at B=8, T=1024 in BF16 on an
// H100: recomputing 3 of 12 blocks is a quarter of blocks' extra FLOPs).
TEST(PlanCli, BlocksEveryKIsPlanned) {
  auto r = run_ratchet("plan --model d12 --device h100 -B 8 -T 1024 --recompute blocks:4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("blocks:4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("<- used below"), std::string::npos) << r.output;
  r = run_ratchet("plan --model d12 --device h100 -B 8 -T 1024 --recompute blocks:4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double k4 = json_number(r.output, "activations_bytes", "blocks:4"),
               none = json_number(r.output, "activations_bytes", "none"),
               all = json_number(r.output, "activations_bytes", "blocks");
  EXPECT_LT(all, k4);
  EXPECT_LT(k4, none);
  expect_usage_error(run_ratchet("plan --recompute blocks:0"), "blocks:k");
}

TEST(PlanCli, JsonFiguresForD12) {
  // d12, cpu, B=4, T=64, 1 rank: params 124,475,904; FP32 params and grads
  // 497,903,616 bytes each; m+v 995,807,232; 20 tokens/parameter =
  // 2,489,518,080 tokens = 9,724,680 steps of 256 tokens.
  auto r = run_ratchet("plan --model d12 --batch-size 4 --seq-len 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string& j = r.output;
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(json_number(j, "model", "params"), 124475904);
  EXPECT_EQ(json_number(j, "memory", "params_bytes"), 497903616);
  EXPECT_EQ(json_number(j, "memory", "grads_bytes"), 497903616);
  EXPECT_EQ(json_number(j, "memory", "master_bytes"), 0);
  EXPECT_EQ(json_number(j, "memory", "adam_bytes"), 995807232);
  EXPECT_EQ(json_number(j, "compute", "tokens"), 2489518080.0);
  EXPECT_EQ(json_number(j, "compute", "steps"), 9724680);
  // gelu drops (L-1)·B·T·4C floats = 11·256·3072·4 = 34,603,008 bytes from "none"
  EXPECT_EQ(json_number(j, "activations_bytes", "none") -
                json_number(j, "activations_bytes", "gelu"),
            34603008);
  // one rank: no all-reduce, full efficiency
  EXPECT_EQ(json_number(j, "time", "allreduce_s"), 0);
  EXPECT_EQ(json_number(j, "time", "dp_efficiency"), 1);
}

TEST(PlanCli, AllReduceAndCostForGivenRates) {
  // 8 x h100, bf16 grads 248,951,808 bytes at 80 Gb/s (10 GB/s):
  // 2·7/8 · 248951808 / 1e10 = 0.0435665664 s. Save 60 s, 0.5 preemptions/h:
  // Young/Daly interval sqrt(2·60·7200) = 929.516 s.
  auto r = run_ratchet("plan --model d12 --device h100 --world-size 8 --link-gbps 80 "
                       "--steps 1000 --save-seconds 60 --preemptions-per-hour 0.5 "
                       "--restart-seconds 120 --price-per-device-hour 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string& j = r.output;
  EXPECT_NEAR(json_number(j, "time", "allreduce_s"), 0.0435665664, 1e-9);
  EXPECT_NEAR(json_number(j, "checkpoint", "interval_s"), 929.516003, 1e-5);
  // spot factor: 1 + 60/929.516 + 0.5 · (464.758 + 120)/3600
  const double work = json_number(j, "time", "work_hours");
  const double f = 1 + 60 / 929.516003 + 0.5 * (929.516003 / 2 + 120) / 3600;
  EXPECT_NEAR(json_number(j, "spot", "wall_factor"), f, 1e-8);
  EXPECT_NEAR(json_number(j, "spot", "cost"), work * f * 8 * 2 * 0.35, 1e-6);
  EXPECT_NEAR(json_number(j, "on_demand", "cost"), work * (1 + 60 / 929.516003) * 8 * 2, 1e-6);
  // ZeRO-1 over 8: m, v each ceil(P/8)·4 = 62,237,952 bytes (a multiple of
  // 256), and the fp32 master of the owned shard as much (the whole 4P without ZeRO).
  EXPECT_EQ(json_number(j, "memory", "master_bytes"), 4 * 124475904.0);
  EXPECT_EQ(json_number(j, "memory", "master_zero1_bytes"), 62237952.0);
  EXPECT_EQ(json_number(j, "memory", "adam_zero1_bytes"), 2 * 62237952.0);
}

TEST(PlanCli, BudgetPicksAModel) {
  // $500 at $1.8/h on an A100 at MFU 0.4: 277.8 h · 3600 · 312e12 · 0.4 = 1.248e20
  // FLOPs -> N = sqrt(C/120) = 1.02e9 parameters.
  auto r = run_ratchet("plan --budget-money 500 --device a100 --price-per-device-hour 1.8 "
                       "--seq-len 1024 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NEAR(json_number(r.output, "compute", "budget_flops"), 500 / 1.8 * 3600 * 312e12 * 0.4,
              1e10);
  EXPECT_NEAR(json_number(r.output, "compute", "optimal_params"), 1.0198e9, 1e6);
  EXPECT_EQ(nlohmann::json::parse(r.output)["model"]["from_budget"], true);
  EXPECT_EQ(json_string(r.output, "model", "name"),
            json_string(r.output, "compute", "suggested_preset"));
  EXPECT_LE(json_number(r.output, "compute", "total_flops"),
            json_number(r.output, "compute", "budget_flops"));
  // with --model the budget only sets the tokens
  r = run_ratchet("plan --model d6 --budget-flops 1e18 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_string(r.output, "model", "name"), "d6");
}

TEST(PlanCli, ReadsATrainingRunsIniFile) {
  TempDir d;
  write_file(d / "run.ini",
             "model = custom\nlayers = 2\nheads = 2\nchannels = 64\nvocab-size = 257\n"
             "max-seq-len = 64\nseq-len = 32\nbatch-size = 4\nsteps = 50\nlr = 1e-3\n"
             "train-data = data/train_*.h5\ndevice = cuda\n");
  // train's --device names a backend: the command line's hardware wins
  auto r = run_ratchet("plan --config " + (d / "run.ini") + " --device h100 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_number(r.output, "model", "layers"), 2);
  EXPECT_EQ(json_number(r.output, "model", "padded_vocab"), 384);
  EXPECT_EQ(json_number(r.output, "compute", "steps"), 50);
  // 384·64 + 64·64 + 2·(12·64² + 13·64) + 2·64 = 128,768 (as the export test counts)
  EXPECT_EQ(json_number(r.output, "model", "params"), 128768);
}

TEST(PlanCli, HelpAndBadInput) {
  auto r = run_ratchet("plan --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("examples:"), std::string::npos);
  EXPECT_NE(r.output.find("--budget-money"), std::string::npos);
  expect_usage_error(run_ratchet("plan --device tpu"), "--device");
  expect_usage_error(run_ratchet("plan --device cuda"), "h100");  // train's backend name
  expect_usage_error(run_ratchet("plan --model d12 --total-batch-tokens 1000"),
                     "--total-batch-tokens");
  expect_usage_error(run_ratchet("plan --budget-flops 1e20 --steps 5"), "budget");
  expect_usage_error(run_ratchet("plan --budget-flops -1"), "--budget-flops");
  expect_usage_error(run_ratchet("plan --model custom --layers 2"), "--channels");
  expect_usage_error(run_ratchet("plan --model e12"), "preset");
  expect_usage_error(run_ratchet("plan --recompute most"), "--recompute");
  expect_usage_error(run_ratchet("plan --no-such-flag"), "no-such-flag");
  for (const char* f : {"0.99", "nan", "-2"})
    expect_usage_error(run_ratchet(std::string("plan --model olmoe-1b-7b --moe-ep-capacity ") + f),
                       std::string("--moe-ep-capacity must be a finite number >= 1 (got ") + f);
  expect_usage_error(run_ratchet("plan --model olmoe-1b-7b --moe-ep-capacity lots"),
                     "the argument ('lots') for option '--moe-ep-capacity' is invalid");
}

// A MoE model without --expert-parallel: one line per size dividing the
// world and the experts (olmoe, 64 experts, 8 H100: 1, 2, 4, 8), in the
// table and the JSON, and the fastest that fits named; with the flag, the
// line for that size only.
TEST(PlanCli, MoeListsEveryExpertParallelSize) {
  const std::string cmd =
      "plan --model olmoe-1b-7b --device h100 --world-size 8 --seq-len 1024 --batch-size 4";
  auto r = run_ratchet(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"expert parallel (--expert-parallel P; ZeRO-1 at --recompute none, --moe-ep-capacity 2",
                        "        P   memory/rank   fits   all-to-all/step   a2a time   step",
                        "        1      49.75 GiB   yes            0.00 GB", "        8      ",
                        "fastest that fits: --expert-parallel 1, step"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
  r = run_ratchet(cmd + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["expert_parallel"]["sizes"].size(), 4u) << r.output;
  EXPECT_EQ(j["expert_parallel"]["sizes"][3]["size"], 8);
  EXPECT_EQ(j["expert_parallel"]["fastest_that_fits"], 1);
  EXPECT_TRUE(j["model"]["expert_parallel"].is_null());
  r = run_ratchet(cmd + " --expert-parallel 8 --moe-ep-capacity 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("expert parallel: 8 (its exchange buffers in the memory above, "
                          "--moe-ep-capacity 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fastest that fits"), std::string::npos) << r.output;
}

// Issue 30, item 6: Llama 3.1 8B on 8 x 80 GB at T=8192. ZeRO-1 (train's:
// sharded master and moments, staging buffers) does not fit unless whole
// blocks are recomputed (none, gelu, gelu+ln: 86.9, 80.1, 76.1 GiB > 70.8;
// blocks, +32% FLOPs: 55.8); auto names a stage that does without, with its
// step time; scaling over 1, 2, 4, 8 nodes loses efficiency as the
// cross-node share grows, never above 1.
TEST(PlanCli, Llama31_8bZeroStagesOnEightH100s) {
  const std::string cmd =
      "plan --model llama3.1-8b --device h100 --world-size 8 --seq-len 8192 --max-seq-len 8192 --batch-size 1";
  auto r = run_ratchet(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"8,030,261,248", "ZeRO-1", "ZeRO-3", "why:", "predicted step", "scaling of",
                        "NVLink 450 GB/s", "model states, ZeRO paper count"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
  // Every stage, 3 included, is what `ratchet train --zero` runs.
  EXPECT_EQ(r.output.find("not yet implemented"), std::string::npos) << r.output;
  r = run_ratchet(cmd + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json z = nlohmann::json::parse(r.output)["zero"];
  EXPECT_EQ(z["usable_bytes"], 76e9);  // 80 GB less the 5% reserve
  ASSERT_TRUE(z["chosen"].is_string()) << z.dump(1);
  const std::string chosen = z["chosen"], policy = z["chosen_recompute"];
  bool saw_zero1 = false, saw_chosen = false;
  for (const auto& st : z["stages"]) {
    if (st["name"] == "ZeRO-1") {
      saw_zero1 = true;
      for (const auto& [name, fits] : st["fits"].items())
        EXPECT_EQ(fits.get<bool>(), name == "blocks") << name;
      EXPECT_NEAR(st["paper_model_state_bytes"].get<double>(), 44.17e9, 0.01e9);
    }
    if (st["name"] == chosen) {
      saw_chosen = true;
      EXPECT_TRUE(st["fits"][policy].get<bool>());
      EXPECT_GE(st["stage"].get<int>(), 2);
      const auto& t = st["time"];
      EXPECT_GT(t["compute_s"].get<double>(), 0);
      EXPECT_GT(t["step_s"].get<double>(), t["compute_s"].get<double>());  // collectives cost something
      EXPECT_GT(t["comm_s"].get<double>(), t["exposed_s"].get<double>());  // ...and mostly overlap
    }
  }
  EXPECT_TRUE(saw_zero1 && saw_chosen) << z.dump(1);
  ASSERT_EQ(z["scaling"].size(), 4u);
  double last = 1.0;
  int nodes = 1;
  for (const auto& s : z["scaling"]) {
    EXPECT_EQ(s["nodes"], nodes);
    EXPECT_EQ(s["world"], 8 * nodes);
    const double e = s["efficiency"];
    EXPECT_GT(e, 0.5);  // T=8192 is compute-heavy: 1.2 s of compute per step
    EXPECT_LT(e, last) << nodes << " nodes";
    last = e;
    nodes *= 2;
  }
}

TEST(PlanCli, ZeroFlags) {
  const std::string base = "plan --model llama3.1-8b --device h100 -T 8192 --max-seq-len 8192 -B 1 --json ";
  auto r = run_ratchet(base + "--world-size 8 --zero 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_string(r.output, "zero", "chosen"), "ZeRO-1");
  EXPECT_NE(json_string(r.output, "zero", "why").find("does NOT fit"), std::string::npos) << r.output;
  r = run_ratchet(base + "--world-size 8 --zero 3 --reshard-after-forward off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_string(r.output, "zero", "chosen"), "ZeRO-3 keep");
  r = run_ratchet(base + "--world-size 32 --zero 3 --shard-group node");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_number(r.output, "zero", "shard_group"), 8);
  EXPECT_EQ(json_number(r.output, "zero", "nodes"), 4);
  // every stage too big: on a 12 GB device even ZeRO-3 with blocks recompute needs more
  r = run_ratchet(base + "--world-size 8 --device-memory-gb 12");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(json_string(r.output, "zero", "why").find("nothing fits"), std::string::npos) << r.output;
  expect_usage_error(run_ratchet("plan --zero 4"), "--zero");
  expect_usage_error(run_ratchet("plan --world-size 8 --shard-group 3"), "--shard-group 3");
  expect_usage_error(run_ratchet("plan --shard-group rack"), "--shard-group");
  expect_usage_error(run_ratchet("plan --device h100 --world-size 12"), "--gpus-per-node");
  expect_usage_error(run_ratchet("plan --gpus-per-node 0"), "--gpus-per-node");
  expect_usage_error(run_ratchet("plan --zero 2 --reshard-after-forward off"), "--zero 3");
  expect_usage_error(run_ratchet("plan --reshard-after-forward 2"), "on or off");
  expect_usage_error(run_ratchet("plan --intra-node-gbs 0"), "--intra-node-gbs");
}

}  // namespace

// Issue 25, item 14: `plan --help` showed 0.34999999999999998 (Boost prints a
// double default with 17 digits, a float's with 9). Every subcommand's help
// prints its defaults as they are written: no number with 8 or more digits
// after the point.
TEST(PlanCli, HelpDefaultsAreShortest) {
  for (const char* cmd : {"train", "shard", "inspect", "verify", "convert", "ckpt", "plan",
                          "report", "sweep init", "sweep run", "sweep status", "sweep report"}) {
    auto r = run_ratchet(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    for (size_t i = r.output.find('.'); i != std::string::npos; i = r.output.find('.', i + 1)) {
      size_t n = 0;
      while (i + 1 + n < r.output.size() && std::isdigit((unsigned char)r.output[i + 1 + n])) n++;
      EXPECT_LT(n, 8u) << cmd << " --help: " << r.output.substr(i > 20 ? i - 20 : 0, 40);
    }
  }
  auto r = run_ratchet("plan --help");
  EXPECT_NE(r.output.find("(=0.35)"), std::string::npos) << r.output;
  r = run_ratchet("train --help");
  EXPECT_NE(r.output.find("(=0.0003)"), std::string::npos) << r.output;  // --lr, a float
}
