// Per-rank sharded checkpoints (ckpt/checkpoint_shards.h) and --ckpt-async
// under `mpirun -np 2|3 ratchet train`, on the odd-sized tiny model of
// test_mpi_train.cpp (P = 14955: the shards split unevenly).
//
// Every comparison here is at the same world size and stage as the straight
// run it is compared with, so the gradients are summed in the same order and
// the weights must be equal BYTE FOR BYTE (the --export files compared with
// ==); runs that change the world size are compared within tolerance in
// test_mpi_train.cpp (ShardedCheckpointResumesOnADifferentWorldSize).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_reader.h"
#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class MpiCkpt : public BibleShardsSuite {
 protected:
  static std::string train_args(int B, int total, const std::string& out_dir, int steps = 8) {
    return "train --model custom --layers 3 --heads 3 --channels 15 --max-seq-len 32 "
           "--seq-len 16 --batch-size " + std::to_string(B) + " --total-batch-tokens " +
           std::to_string(total) + " --threads 1 --train-data '" + (*dir_ / "data/train_*.h5") +
           "' --val-data '" + (*dir_ / "data/val_*.h5") + "' --eval-every 4 --eval-batches 6 "
           "--warmup-steps 2 --steps " + std::to_string(steps) + " --lr 3e-3 --quiet "
           "--export " + out_dir + "/out.bin";
  }
  // The straight run of `ranks` ranks at `zero`, never stopped: its exported
  // weights (run once per configuration).
  static const std::string& straight(int ranks, const std::string& zero) {
    static std::map<std::string, std::string> done;
    std::string& bytes = done[std::to_string(ranks) + zero];
    if (bytes.empty()) {
      TempDir d;
      auto r = mpirun_ratchet(ranks, train_args(6 / ranks, 96, d.path) + zero);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      bytes = read_file(d / "out.bin");
    }
    return bytes;
  }
};

// Every rank writes its own shard at every stage (stage 0: an even 1/W of
// the parameters; ZeRO-1: its owned range), and the manifest lists them; a
// stop and a resume at the same (stage, world) end byte-identical.
TEST_F(MpiCkpt, EveryRankWritesItsShardAndAResumeIsByteIdentical) {
  for (int ranks : {2, 3})
    for (const std::string zero : {"", " --zero 1"}) {
      const std::string what = std::to_string(ranks) + " ranks" + zero;
      TempDir run;
      const std::string ck = run / "ck";
      auto r = mpirun_ratchet(ranks, train_args(6 / ranks, 96, run.path) + zero + " --ckpt-dir " + ck,
                              "RATCHET_FAULT=USR1@step-4");
      ASSERT_EQ(r.exit_code, 75) << what << "\n" << r.output;
      const ratchet::CheckpointReader reader(ck + "/step_00000004");
      ASSERT_EQ((int)reader.shards().size(), ranks) << what;
      size_t largest = 0, smallest = SIZE_MAX;
      for (int k = 0; k < ranks; k++) {
        EXPECT_EQ(reader.shards()[k].rank, k) << what;
        const size_t n = ratchet::ranges_length(reader.shards()[k].ranges);
        largest = std::max(largest, n);
        smallest = std::min(smallest, n);
      }
      // An even split: no rank wrote (or gathered) much more than 1/W. ZeRO-1
      // with --overlap-comm on (the default) shards by gradient bucket
      // (distributed/buckets.h): the last rank's piece of each of the L + 1 = 4
      // buckets may be up to W - 1 elements short.
      EXPECT_LE(largest - smallest, (size_t)(zero.empty() ? ranks : 4 * (ranks - 1))) << what;
      EXPECT_EQ(run_ratchet("ckpt verify " + ck).exit_code, 0) << what;
      r = mpirun_ratchet(ranks, train_args(6 / ranks, 96, run.path) + zero + " --ckpt-dir " + ck);
      ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
      EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
      EXPECT_TRUE(read_file(run / "out.bin") == straight(ranks, zero)) << what << ": weights differ";
    }
}

// --ckpt-async: rank 1 is killed in the middle of writing its shard of the
// second save (step 4) in the background. The previous checkpoint (step 2)
// stays the newest valid one; the rerun resumes from it and ends
// byte-identical to a run never stopped.
TEST_F(MpiCkpt, AKillDuringAnAsyncWriteLeavesThePreviousCheckpoint) {
  TempDir run;
  const std::string ck = run / "ck";
  const std::string args = train_args(3, 96, run.path) + " --zero 1 --ckpt-dir " + ck +
                           " --ckpt-every-steps 2 --ckpt-async";
  auto r = mpirun_ratchet(2, args, "RATCHET_FAULT='rank1/ckpt-mid-write*2'");
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("killing the process at 'ckpt-mid-write'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("written in the background"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000002\n");
  EXPECT_FALSE(fs::exists(ck + "/step_00000004"));
  r = mpirun_ratchet(2, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 2"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(run / "out.bin") == straight(2, " --zero 1")) << "weights differ";
  // Every checkpoint of the rerun is valid; the killed save's staging is gone.
  r = run_ratchet("ckpt verify " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const auto& e : fs::directory_iterator(ck))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

// A stop signal right after an async save: the stop waits for the write,
// commits it, saves its own step and exits 75; both checkpoints are valid.
TEST_F(MpiCkpt, AStopSignalWaitsForTheAsyncWrite) {
  TempDir run;
  const std::string ck = run / "ck";
  const std::string args = train_args(3, 96, run.path) + " --zero 1 --ckpt-dir " + ck +
                           " --ckpt-every-steps 4 --ckpt-async";
  auto r = mpirun_ratchet(2, args, "RATCHET_FAULT=rank0/USR1@step-5");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("checkpoint (periodic): step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checkpoint (stop signal): step 5"), std::string::npos) << r.output;
  r = run_ratchet("ckpt verify " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ok         " + ck + "/step_00000004"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ok         " + ck + "/step_00000005"), std::string::npos) << r.output;
  r = mpirun_ratchet(2, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(run / "out.bin") == straight(2, " --zero 1")) << "weights differ";
}

// The disk fills up while the ranks write their shards in parallel (a tmpfs
// sized to hold about one and a half of the next checkpoint's two shards:
// the rank that writes second finds too little room, refused before it
// writes or, when both start at once, out of space in the middle; the unit
// test CheckpointShards.ConcurrentWritersOnAFullDisk forces the latter):
// the ranks agree that the save failed, the run fails (exit 1) naming it,
// the staging directory is removed, and the previous checkpoint stays the
// newest valid one; with room again the run resumes and ends byte-identical.
TEST_F(MpiCkpt, DiskFullWhileRanksWriteKeepsThePreviousCheckpoint) {
  TempDir run;
  const std::string mnt = run / "mnt";
  fs::create_directories(mnt);
  if (run_shell("mount -t tmpfs -o size=8m tmpfs " + mnt).exit_code != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (not root, or no mount namespace)";
  struct Unmount {
    std::string at;
    ~Unmount() { run_shell("umount -l " + at); }
  } unmount{mnt};
  const std::string ck = mnt + "/ck";
  const std::string args = train_args(3, 96, run.path) + " --zero 1 --ckpt-dir " + ck;
  auto r = mpirun_ratchet(2, args, "RATCHET_FAULT=USR1@step-4");  // the same LR schedule throughout
  ASSERT_EQ(r.exit_code, 75) << r.output;
  // Room for what is there now plus 1.5 shards (of the two the next save writes).
  const uint64_t shard = fs::file_size(ck + "/step_00000004/shard_00000.h5");
  const auto used = run_shell("df -k --output=used " + mnt + " | tail -1");
  const uint64_t used_kb = std::stoull(used.output);
  const uint64_t size_kb = used_kb + (shard * 3 / 2) / 1024 + 4;
  ASSERT_EQ(run_shell("mount -o remount,size=" + std::to_string(size_kb) + "k " + mnt).exit_code, 0);
  r = mpirun_ratchet(2, args + " --ckpt-every-steps 6");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint save at step 6 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("previous checkpoint (step_00000004) is intact"), std::string::npos)
      << r.output;
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000004\n");
  EXPECT_FALSE(fs::exists(ck + "/step_00000006"));
  for (const auto& e : fs::directory_iterator(ck))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  ASSERT_EQ(run_shell("mount -o remount,size=8m " + mnt).exit_code, 0);
  r = mpirun_ratchet(2, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(run / "out.bin") == straight(2, " --zero 1")) << "weights differ";
}

}  // namespace

namespace {

// The ranks verify a checkpoint together at resume (each a share of its
// datasets): a damaged shard in the newest checkpoint, found by whichever
// rank verifies it, makes all of them skip it and resume from the one before,
// ending byte-identical; a truncated shard is caught before any data is read.
TEST_F(MpiCkpt, ADamagedShardFoundByAnyRankMakesTheResumeFallBack) {
  for (const std::string damage : {"flip", "truncate"}) {
    TempDir run;
    const std::string ck = run / "ck";
    const std::string args = train_args(3, 96, run.path) + " --zero 1 --ckpt-dir " + ck +
                             " --ckpt-every-steps 2 --keep-last 5";
    auto r = mpirun_ratchet(2, args, "RATCHET_FAULT=USR1@step-5");
    ASSERT_EQ(r.exit_code, 75) << r.output;
    const std::string shard = ck + "/step_00000005/shard_00001.h5";
    std::string bytes = read_file(shard);
    if (damage == "flip")
      bytes[bytes.size() / 2] ^= 0x10;
    else
      bytes.resize(bytes.size() - 100);
    write_file(shard, bytes);
    r = mpirun_ratchet(2, args);
    ASSERT_EQ(r.exit_code, 0) << damage << "\n" << r.output;
    const size_t skip = r.output.find("skipping " + ck + "/step_00000005: checkpoint ");
    ASSERT_NE(skip, std::string::npos) << damage << "\n" << r.output;
    EXPECT_NE(r.output.find(shard, skip), std::string::npos) << damage << "\n" << r.output;
    EXPECT_NE(r.output.find(damage == "flip" ? "fails its checksum" : "(truncated?)"),
              std::string::npos) << damage << "\n" << r.output;
    EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
    EXPECT_TRUE(read_file(run / "out.bin") == straight(2, " --zero 1")) << damage;
  }
}

}  // namespace

namespace {

// ZeRO-2 owns a piece of every bucket: each rank's shard lists many ranges;
// hybrid sharding (--shard-group 1 on 2 ranks: two groups of one) writes one
// copy of each range, from group 0 only. Both resume byte-identically.
TEST_F(MpiCkpt, StageTwoShardsHoldManyRangesAndHybridReplicasDoNotWrite) {
  struct Case {
    std::string flags;
    size_t shards, min_ranges;
  };
  for (const Case& c : {Case{" --zero 2", 2, 2}, Case{" --zero 1 --shard-group 1", 1, 1}}) {
    TempDir run;
    const std::string ck = run / "ck";
    auto r = mpirun_ratchet(2, train_args(3, 96, run.path) + c.flags + " --ckpt-dir " + ck,
                            "RATCHET_FAULT=USR1@step-4");
    ASSERT_EQ(r.exit_code, 75) << c.flags << "\n" << r.output;
    const ratchet::CheckpointReader reader(ck + "/step_00000004");
    ASSERT_EQ(reader.shards().size(), c.shards) << c.flags;
    for (const auto& s : reader.shards()) EXPECT_GE(s.ranges.size(), c.min_ranges) << c.flags;
    EXPECT_EQ(reader.shards()[0].rank, 0);
    r = mpirun_ratchet(2, train_args(3, 96, run.path) + c.flags + " --ckpt-dir " + ck);
    ASSERT_EQ(r.exit_code, 0) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
    EXPECT_TRUE(read_file(run / "out.bin") == straight(2, c.flags)) << c.flags;
  }
}

}  // namespace

#ifdef RATCHET_SIMT_EXE
namespace {

// The cuda backend's host code on the CPU (ratchet-simt), BF16 storage with
// ZeRO-1 on 2 ranks: each rank writes the FP32 master values of the range it
// owns (only the owner's master copy is current: nothing is gathered first),
// sync and async; a stop at step 3 and a resume end byte-identical to the
// straight run (the BF16 weights rebuilt from the masters as the last step
// rounded them).
TEST_F(MpiCkpt, SimtBf16Zero1ShardsHoldTheOwnersMasterWeights) {
  auto args = [&](const std::string& out) {
    return "train --device simt --storage bf16 --zero 1 --model custom --layers 2 --heads 2 "
           "--channels 16 --max-seq-len 32 --seq-len 16 --batch-size 2 --total-batch-tokens 64 "
           "--threads 1 --train-data '" + (*dir_ / "data/train_*.h5") + "' --warmup-steps 2 "
           "--steps 6 --lr 3e-3 --quiet --export " + out + "/out.bin";
  };
  auto run2 = [&](const std::string& a, const std::string& env = "") {
    return run_shell(mpirun_prefix(2, env) + RATCHET_SIMT_EXE + " " + a);
  };
  TempDir ref;
  auto r = run2(args(ref.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string mode : {"", " --ckpt-every-steps 2 --ckpt-async"}) {
    TempDir run;
    const std::string a = args(run.path) + " --ckpt-dir " + (run / "ck") + mode;
    r = run2(a, "RATCHET_FAULT=USR1@step-3");
    ASSERT_EQ(r.exit_code, 75) << mode << "\n" << r.output;
    EXPECT_EQ(ratchet::CheckpointReader(run / "ck/step_00000003").shards().size(), 2u) << mode;
    r = run2(a);
    ASSERT_EQ(r.exit_code, 0) << mode << "\n" << r.output;
    EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
    EXPECT_TRUE(read_file(run / "out.bin") == read_file(ref / "out.bin")) << "weights differ" << mode;
  }
}

// Stages 1 and 2 on several ranks keep the FP32 master of the owned ranges
// only (docs/distributed.md). A stage-2 checkpoint of 2 ranks (each shard its
// owner's master values) resumed at stage 0 (a whole master, from the
// shards) and at stage 1 on 2 ranks ends byte-identical to the straight
// stage-2 run, as does a stage-1 checkpoint resumed at stage 2; resumed on 3
// ranks (B 3 -> 2, the same 6 rows per step) it continues, the sum over 3
// ranks rounding otherwise (BF16: within test_mpi_train's loss tolerance).
// The --export at the end is params_f32's gather of the owners' masters.
TEST_F(MpiCkpt, SimtBf16ShardedMastersResumeAtAnotherStageAndWorld) {
  auto args = [&](int B, const std::string& out, const std::string& zero) {
    return "train --device simt --storage bf16 --model custom --layers 2 --heads 2 "
           "--channels 16 --max-seq-len 32 --seq-len 16 --batch-size " + std::to_string(B) +
           " --total-batch-tokens 96 --threads 1 --train-data '" + (*dir_ / "data/train_*.h5") +
           "' --warmup-steps 2 --steps 6 --lr 3e-3 --quiet --log-jsonl " + out + "/log.jsonl "
           "--export " + out + "/out.bin --zero " + zero;
  };
  auto run = [&](int n, const std::string& a, const std::string& env = "") {
    return run_shell(mpirun_prefix(n, env) + RATCHET_SIMT_EXE + " " + a);
  };
  for (const std::string& first : {std::string("2"), std::string("1")}) {
    TempDir ref, stopped;
    auto r = run(2, args(3, ref.path, first));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string ck = stopped / "ck";
    r = run(2, args(3, stopped.path, first) + " --ckpt-dir " + ck, "RATCHET_FAULT=USR1@step-3");
    ASSERT_EQ(r.exit_code, 75) << r.output;
    EXPECT_EQ(ratchet::CheckpointReader(ck + "/step_00000003").shards().size(), 2u);
    for (const std::string& then : {std::string("0"), first == "2" ? std::string("1") : std::string("2")}) {
      const std::string what = "--zero " + first + " -> --zero " + then;
      TempDir again;
      fs::copy(ck, again / "ck", fs::copy_options::recursive);
      r = run(2, args(3, again.path, then) + " --ckpt-dir " + (again / "ck"));
      ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
      EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
      EXPECT_TRUE(read_file(again / "out.bin") == read_file(ref / "out.bin")) << what;
    }
    if (first != "2") continue;
    TempDir three;
    fs::copy(ck, three / "ck", fs::copy_options::recursive);
    r = run(3, args(2, three.path, "2") + " --ckpt-dir " + (three / "ck"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
    const std::vector<double> a = read_losses(ref / "log.jsonl"), b = read_losses(three / "log.jsonl");
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 3u);  // steps 4-6, logged by the resumed run
    for (size_t i = 0; i < 3; i++)  // BF16 sums over 3 ranks: test_mpi_train's kBf16LossTol
      EXPECT_NEAR(b[i], a[3 + i], 1e-3 * std::fabs(a[3 + i])) << "step " << 4 + i;
  }
}

// --export-hf of a Llama trained with the master sharded (ZeRO-1 and 2 on 2
// ranks, BF16 on simt): each rank's FP32 values from its owner's master,
// gathered on the host; the safetensors file equals the unsharded --zero 0
// run's byte for byte (one micro-batch per rank: the same sums).
TEST_F(MpiCkpt, SimtBf16LlamaExportHfOfShardedMastersEqualsStage0) {
  auto args = [&](const std::string& out, const std::string& zero) {
    return "train --device simt --storage bf16 --model custom --arch llama --layers 2 --heads 2 "
           "--kv-heads 1 --channels 16 --ffn-hidden 24 --untied --max-seq-len 32 --seq-len 16 "
           "--batch-size 2 --total-batch-tokens 64 --threads 1 --train-data '" +
           (*dir_ / "data/train_*.h5") + "' --warmup-steps 2 --steps 4 --lr 3e-3 --quiet "
           "--export-hf " + out + "/hf --export-dtype f32 --zero " + zero;
  };
  auto run2 = [&](const std::string& a) {
    return run_shell(mpirun_prefix(2) + RATCHET_SIMT_EXE + " " + a);
  };
  TempDir plain;
  auto r = run2(args(plain.path, "0"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string want = read_file(plain / "hf/model.safetensors");
  ASSERT_FALSE(want.empty());
  for (const std::string zero : {"1", "2"}) {
    TempDir d;
    r = run2(args(d.path, zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO-" + zero), std::string::npos) << r.output;
    EXPECT_TRUE(read_file(d / "hf/model.safetensors") == want) << "--zero " << zero;
  }
}

// Hybrid sharding (--shard-group 2 on 4 ranks, ZeRO-1 and 2): the master is
// sharded over each group of 2, and --export gathers the FP32 values inside
// the group (params_f32); a run that saves a checkpoint at its last step
// exports from the checkpoint's shards instead (written by group 0's
// owners). Both give the same bytes.
TEST_F(MpiCkpt, SimtBf16ShardGroupExportFromMemoryEqualsFromShards) {
  auto args = [&](const std::string& out, const std::string& zero) {
    return "train --device simt --storage bf16 --model custom --layers 2 --heads 2 --channels 16 "
           "--max-seq-len 32 --seq-len 16 --batch-size 1 --total-batch-tokens 64 --threads 1 "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --warmup-steps 2 --steps 3 --lr 3e-3 "
           "--quiet --export " + out + "/out.bin --shard-group 2 --zero " + zero;
  };
  auto run4 = [&](const std::string& a) {
    return run_shell(mpirun_prefix(4) + RATCHET_SIMT_EXE + " " + a);
  };
  for (const std::string zero : {"1", "2"}) {
    TempDir mem, ck;
    auto r = run4(args(mem.path, zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run4(args(ck.path, zero) + " --ckpt-dir " + (ck / "ck"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(ratchet::CheckpointReader(ck / "ck/step_00000003").shards().size(), 2u) << zero;
    EXPECT_FALSE(read_file(mem / "out.bin").empty());
    EXPECT_TRUE(read_file(mem / "out.bin") == read_file(ck / "out.bin")) << "--zero " << zero;
  }
}

}  // namespace
#endif  // RATCHET_SIMT_EXE
