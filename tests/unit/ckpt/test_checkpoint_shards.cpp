// Format 3 checkpoints (ckpt/checkpoint_shards.h, checkpoint_reader.h):
// shards of any ranges written by several "ranks" read back whole and in any
// other ranks' parts, bit for bit; a checkpoint damaged as a hostile user or
// a failing disk would (truncated shard, flipped bit, missing manifest entry,
// missing shard, doubled entry, a manifest name pointing outside, no
// manifest) is invalid and the previous one is used; formats 1 and 2 are
// still read, also in parts.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <atomic>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_shards.h"
#include "core/error.h"
#include "core/json.h"
#include "data/h5_util.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

// Distinct values per tensor and element, so a misplaced range shows.
Checkpoint whole_checkpoint(int64_t step) {
  Checkpoint ck;
  ck.meta.model = tiny_config();
  ck.meta.step = step;
  ck.meta.adam_t = (int)step;
  ck.meta.identity = {{"seed", "1"}};
  const size_t P = ParamLayout(ck.meta.model).total;
  for (size_t i = 0; i < P; i++) {
    ck.params.push_back(0.001f * (float)i + (float)step);
    ck.adam_m.push_back(-0.5f * (float)i);
    ck.adam_v.push_back(1.0f + 0.25f * (float)i);
  }
  return ck;
}

// Bucket-like layouts: rank r owns every W-th piece of `pieces` cuts.
std::vector<FlatRanges> interleaved(size_t P, int W, int pieces) {
  std::vector<FlatRanges> out(W);
  for (int k = 0; k < pieces; k++) {
    const size_t lo = P * k / pieces, hi = P * (k + 1) / pieces;
    if (hi > lo) out[k % W].push_back({lo, hi});
  }
  return out;
}

std::vector<float> gather(const std::vector<float>& full, const FlatRanges& r) {
  std::vector<float> out;
  for (const auto& [lo, hi] : r) out.insert(out.end(), full.begin() + lo, full.begin() + hi);
  return out;
}

// Commits `ck` into `dir` as format 3 with these per-rank ranges.
std::string save_sharded(CheckpointDir& dir, const Checkpoint& ck, const std::vector<FlatRanges>& layout) {
  const std::string staging = dir.begin_save(ck.meta.step);
  const size_t P = ck.params.size();
  std::vector<ShardFileInfo> shards;
  for (int r = 0; r < (int)layout.size(); r++) {
    if (layout[r].empty()) continue;
    const auto p = gather(ck.params, layout[r]), m = gather(ck.adam_m, layout[r]),
               v = gather(ck.adam_v, layout[r]);
    shards.push_back(write_param_shard(staging, ck.meta.step, r, (int)layout.size(), P, layout[r],
                                       p.data(), m.data(), v.data()));
  }
  RetentionPolicy keep;
  keep.keep_last = 10;
  return dir.commit_sharded_save(staging, ck.meta, shards, keep).path;
}

TEST(CheckpointShards, AnyRangesReadBackWholeAndAsAnyOtherRanksParts) {
  TempDir d;
  CheckpointDir dir(d / "ck");
  const Checkpoint ck = whole_checkpoint(7);
  const size_t P = ck.params.size();
  // Written by 3 ranks owning 4 bucket-like pieces each...
  const std::string path = save_sharded(dir, ck, interleaved(P, 3, 12));
  for (int r = 0; r < 3; r++) EXPECT_TRUE(fs::exists(path + "/" + param_shard_name(r))) << r;
  const Checkpoint back = read_checkpoint(path);
  EXPECT_EQ(back.params, ck.params);
  EXPECT_EQ(back.adam_m, ck.adam_m);
  EXPECT_EQ(back.adam_v, ck.adam_v);
  EXPECT_EQ(back.meta.adam_t, 7);
  // ... read by 2 ranks with one flat range each, and by 5 with other pieces.
  const CheckpointReader reader(path);
  EXPECT_EQ(reader.shards().size(), 3u);
  EXPECT_NO_THROW(reader.verify());
  for (const auto& layout : {interleaved(P, 2, 2), interleaved(P, 5, 35)})
    for (const FlatRanges& mine : layout) {
      const Checkpoint part = read_checkpoint_part(reader, mine);
      EXPECT_EQ(part.params, ck.params);  // every rank gets all parameters
      EXPECT_EQ(part.adam_m, gather(ck.adam_m, mine));
      EXPECT_EQ(part.adam_v, gather(ck.adam_v, mine));
    }
  EXPECT_EQ(dir.check_entry(dir.list().back()), "");
}

// An expert slice reads only its own parameters (param_ranges), back to back,
// across the shards' boundaries; ranges outside the checkpoint are refused by
// name instead of read.
TEST(CheckpointShards, ParamRangesReadOnlyThoseParameters) {
  TempDir d;
  CheckpointDir dir(d / "ck");
  const Checkpoint ck = whole_checkpoint(4);
  const size_t P = ck.params.size();
  const std::string path = save_sharded(dir, ck, interleaved(P, 3, 12));
  const CheckpointReader reader(path);
  for (const FlatRanges& params : interleaved(P, 4, 9)) {
    const FlatRanges moments = {{1, P / 2}};
    const Checkpoint part = read_checkpoint_part(reader, moments, params);
    EXPECT_EQ(part.param_ranges, params);
    EXPECT_EQ(part.params, gather(ck.params, params));
    EXPECT_EQ(part.adam_m, gather(ck.adam_m, moments));
  }
  EXPECT_TRUE(read_checkpoint_part(reader, {}).param_ranges.empty());
  expect_error([&] { read_checkpoint_part(reader, {}, {{0, P + 1}}); },
               {path, "does not match the checkpoint"});
  expect_error([&] { read_checkpoint_part(reader, {{P - 1, P + 5}}); },
               {"does not match the checkpoint"});
}

// ---- hostile damage ----------------------------------------------------------

std::string flip_byte(const std::string& path, size_t at) {
  std::string bytes = read_file(path);
  bytes[at] ^= 0x10;
  write_file(path, bytes);
  return path;
}

// Rewrites manifest.json through `change`.
void edit_manifest(const std::string& ckpt, const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json j = nlohmann::json::parse(read_file(ckpt + "/manifest.json"));
  change(j);
  write_file(ckpt + "/manifest.json", j.dump(2));
}

struct Damage {
  const char* name;
  std::function<void(const std::string& ckpt)> apply;
  const char* says;  // a piece of the reason check_entry gives
};

TEST(CheckpointShards, DamagedShardsMakeItInvalidAndTheNewestValidIsUsed) {
  const std::vector<Damage> damages = {
      {"truncated shard",
       [](const std::string& c) {
         const std::string s = c + "/shard_00001.h5";
         write_file(s, read_file(s).substr(0, fs::file_size(s) / 2));
       },
       "bytes, the manifest says"},
      {"flipped bit in a shard's data",
       [](const std::string& c) {
         // The shard's tensors fill most of the file: its middle is data.
         const std::string s = c + "/shard_00001.h5";
         flip_byte(s, fs::file_size(s) / 2);
       },
       "fails its checksum"},
      {"flipped bit in a shard's HDF5 superblock",
       [](const std::string& c) { flip_byte(c + "/shard_00001.h5", 20); },
       "headers fail their checksum"},
      {"flipped bit in state.h5",
       [](const std::string& c) { flip_byte(c + "/state.h5", fs::file_size(c + "/state.h5") / 2); },
       "state.h5"},
      {"missing shard file", [](const std::string& c) { fs::remove(c + "/shard_00002.h5"); },
       "shard_00002.h5 is missing"},
      {"manifest entry removed",
       [](const std::string& c) { edit_manifest(c, [](nlohmann::json& j) { j["files"].erase(2); }); },
       "lists 2 shard(s) but state.h5 says the checkpoint has 3"},
      {"manifest entry doubled (and one dropped)",
       [](const std::string& c) {
         edit_manifest(c, [](nlohmann::json& j) { j["files"][3] = j["files"][2]; });
       },
       "two shards both hold"},
      {"manifest range narrowed",
       [](const std::string& c) {
         edit_manifest(c, [](nlohmann::json& j) {
           auto& r = j["files"][1]["ranges"][0];
           r[1] = r[1].get<uint64_t>() - 1;
         });
       },
       // The shard's data is cut where the manifest's ranges say, so its
       // headers' checksum fails first (before /ranges can be compared).
       "the file or its manifest entry is damaged"},
      {"manifest name outside the checkpoint",
       [](const std::string& c) {
         edit_manifest(c, [](nlohmann::json& j) { j["files"][1]["name"] = "../../etc/passwd"; });
       },
       "is not named shard_00000.h5"},
      // Numbers that nlohmann's get<> would convert with undefined behaviour
      // (tests/fuzz/fuzz_ckpt_manifest.cpp found the first).
      {"manifest num_params a huge float",
       [](const std::string& c) { edit_manifest(c, [](nlohmann::json& j) { j["num_params"] = 1e300; }); },
       "'num_params' is 1e+300, not a whole number"},
      {"manifest shard size fractional",
       [](const std::string& c) {
         edit_manifest(c, [](nlohmann::json& j) { j["files"][1]["bytes"] = 2.5; });
       },
       "'bytes' is 2.5, not a whole number"},
      {"manifest not JSON", [](const std::string& c) { write_file(c + "/manifest.json", "{\"files\": ["); },
       "is not valid JSON"},
      {"manifest missing", [](const std::string& c) { fs::remove(c + "/manifest.json"); },
       "no manifest.json"},
  };
  for (const Damage& dmg : damages) {
    TempDir d;
    CheckpointDir dir(d / "ck");
    const Checkpoint good = whole_checkpoint(4), newer = whole_checkpoint(8);
    const size_t P = good.params.size();
    save_sharded(dir, good, interleaved(P, 3, 3));
    const std::string victim = save_sharded(dir, newer, interleaved(P, 3, 9));
    ASSERT_EQ(dir.check_entry(dir.list().back()), "") << dmg.name;
    dmg.apply(victim);
    const CheckpointDir fresh(d / "ck", false);  // nothing remembered as verified
    const std::string why = fresh.check_entry(fresh.list().back());
    EXPECT_NE(why.find(dmg.says), std::string::npos) << dmg.name << ": " << why;
    std::vector<std::string> warnings;
    const std::string chosen =
        fresh.newest_valid_path([&](const std::string& w) { warnings.push_back(w); });
    EXPECT_EQ(chosen, d / "ck/step_00000004") << dmg.name;
    ASSERT_EQ(warnings.size(), 1u) << dmg.name;
    EXPECT_NE(warnings[0].find("skipping " + victim), std::string::npos) << warnings[0];
    // A whole read says the same as the check, never returns damaged data.
    EXPECT_THROW(read_checkpoint(victim), Error) << dmg.name;
  }
}

// state.h5 is checked against the manifest's size and crc32 before the HDF5
// library parses it: a flipped bit anywhere in it, headers included, is that
// checksum's Error, never libhdf5 reading a corrupted header (one such flip
// read past a heap buffer inside libhdf5: tests/fuzz/fuzz_ckpt_manifest.cpp).
TEST(CheckpointShards, AFlipAnywhereInStateH5IsAChecksumErrorBeforeHdf5ReadsIt) {
  TempDir d;
  CheckpointDir dir(d / "ck");
  const Checkpoint ck = whole_checkpoint(4);
  const std::string c = save_sharded(dir, ck, interleaved(ck.params.size(), 2, 2));
  const std::string state = c + "/state.h5", good = read_file(state);
  for (size_t at = 0; at < good.size(); at += 5) {
    std::string bad = good;
    bad[at] ^= (char)(1u << (at % 8));
    write_file(state, bad);
    try {
      (void)CheckpointReader(c);
      ADD_FAILURE() << "a flip at byte " << at << " was not noticed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("state.h5 fails its checksum"), std::string::npos)
          << "byte " << at << ": " << e.what();
    }
  }
  write_file(state, good);
  EXPECT_NO_THROW(CheckpointReader(c).verify());
}

// The same for a shard: its headers (everything outside the tensors' data,
// whose offsets the manifest lists) are checked against the manifest's
// header_crc32 before HDF5 parses them, its data by each tensor's crc32.
TEST(CheckpointShards, AFlipAnywhereInAShardIsAChecksumError) {
  TempDir d;
  CheckpointDir dir(d / "ck");
  const Checkpoint ck = whole_checkpoint(4);
  const std::string c = save_sharded(dir, ck, interleaved(ck.params.size(), 2, 2));
  const std::string shard = c + "/shard_00001.h5", good = read_file(shard);
  int headers = 0, data = 0;
  // Densely where HDF5 keeps its headers (the first and last 4 KB), sparsely
  // in the tensors between (each flip there costs a whole verify).
  const size_t size = good.size();
  for (size_t at = 0; at < size; at += at < 4096 || at + 4096 > size ? 7 : 997) {
    std::string bad = good;
    bad[at] ^= (char)(1u << (at % 8));
    write_file(shard, bad);
    try {
      CheckpointReader(c).verify();
      ADD_FAILURE() << "a flip at byte " << at << " was not noticed";
    } catch (const Error& e) {
      const std::string what = e.what();
      headers += what.find("headers fail their checksum") != std::string::npos;
      data += what.find("fails its checksum") != std::string::npos;
      EXPECT_NE(what.find("checksum"), std::string::npos) << "byte " << at << ": " << what;
    }
  }
  EXPECT_GT(headers, 0);
  EXPECT_GT(data, 0);
  write_file(shard, good);
  EXPECT_NO_THROW(CheckpointReader(c).verify());
}

// ---- formats 1 and 2 -------------------------------------------------------------

TEST(CheckpointShards, Formats1And2AreStillReadWholeAndInParts) {
  const Checkpoint ck = whole_checkpoint(5);
  const size_t P = ck.params.size();
  const FlatRanges mine = {{5, 17}, {100, P}};
  {  // format 1: everything in state.h5
    TempDir d;
    write_checkpoint_files(d.path, ck);
    const CheckpointReader r(d.path);
    EXPECT_EQ(r.format_version(), 1);
    EXPECT_NO_THROW(r.verify());
    const Checkpoint part = read_checkpoint_part(r, mine);
    EXPECT_EQ(part.params, ck.params);
    EXPECT_EQ(part.adam_m, gather(ck.adam_m, mine));
    EXPECT_EQ(part.adam_v, gather(ck.adam_v, mine));
  }
  {  // format 2: ZeRO-1 optimizer shards beside state.h5's parameters
    TempDir d;
    Checkpoint meta_only = ck;
    meta_only.meta.optimizer_shards = 2;
    write_checkpoint_files(d.path, meta_only);
    const size_t half = P / 2;
    write_optimizer_shard(d.path, 5, 0, 2, P, 0, half, ck.adam_m.data(), ck.adam_v.data());
    write_optimizer_shard(d.path, 5, 1, 2, P, half, P, ck.adam_m.data() + half,
                          ck.adam_v.data() + half);
    const CheckpointReader r(d.path);
    EXPECT_EQ(r.format_version(), 2);
    EXPECT_NO_THROW(r.verify());
    const Checkpoint part = read_checkpoint_part(r, mine);
    EXPECT_EQ(part.params, ck.params);
    EXPECT_EQ(part.adam_m, gather(ck.adam_m, mine));
    EXPECT_EQ(part.adam_v, gather(ck.adam_v, mine));
    const Checkpoint whole = read_checkpoint(d.path);
    EXPECT_EQ(whole.adam_v, ck.adam_v);
  }
}

// verify() names the tensor of a non-finite parameter in any shard (values
// with valid checksums: a run that diverged before the save refused them).
TEST(CheckpointShards, VerifyNamesANonFiniteParameterInAnyShard) {
  TempDir d;
  CheckpointDir dir(d / "ck");
  Checkpoint ck = whole_checkpoint(3);
  const ParamLayout layout(ck.meta.model);
  const size_t at = layout.offsets[P_WPE] + 7;
  ck.params[at] = NAN;
  const std::string path = save_sharded(dir, ck, interleaved(ck.params.size(), 2, 6));
  try {
    CheckpointReader(path).verify();
    FAIL() << "a NaN parameter passed verify";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'wpe' holds nan at element 7"), std::string::npos)
        << e.what();
  }
}

// A disk that fills up in the middle of a shard: two writers start together
// on a tmpfs with room for one and a half shards, so (nearly always) both
// pass the room check before writing and the second runs out of space
// mid-write (ENOSPC from HDF5's write, flush or close; when one thread is
// late, the room check refuses it instead: the line printed says which). It
// must be an Error naming its file (both writers may fail so), never a crash
// or a hang, and a shard that did get written is intact.
TEST(CheckpointShards, ConcurrentWritersOnAFullDisk) {
  TempDir d;
  const std::string mnt = d / "mnt";
  fs::create_directories(mnt);
  const size_t n = 1 << 20;  // floats per tensor: a 12 MB shard
  const size_t shard_kb = 3 * n * 4 / 1024;
  // Room for 1.5 shards plus the 64 KB the room check asks beyond the data.
  if (run_shell("mount -t tmpfs -o size=" + std::to_string(shard_kb * 3 / 2 + 64 + 16) + "k tmpfs " +
                mnt).exit_code != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (not root, or no mount namespace)";
  struct Unmount {
    std::string at;
    ~Unmount() { run_shell("umount -l " + at); }
  } unmount{mnt};
  const size_t P = 2 * n;
  std::vector<float> data(3 * n, 0.25f);
  std::string err[2];
  ShardFileInfo info[2];
  std::vector<std::thread> writers;
  std::atomic<int> ready{0};
  for (int r = 0; r < 2; r++)
    writers.emplace_back([&, r] {
      h5_init();
      ready++;
      while (ready.load() < 2) {  // both start together: both pass the room check
      }
      try {
        const FlatRanges mine = {{r * n, (r + 1) * n}};
        info[r] = write_param_shard(mnt, 1, r, 2, P, mine, data.data(), data.data() + n,
                                    data.data() + 2 * n);
      } catch (const Error& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : writers) t.join();
  // Both cannot fit; both may fail (each ran out of room in the middle).
  ASSERT_GE(!err[0].empty() + !err[1].empty(), 1) << "both shards fit on a disk for 1.5";
  for (int r = 0; r < 2; r++) {
    if (err[r].empty()) {  // whole: the size it reported, the checksums it computed
      EXPECT_EQ(fs::file_size(mnt + "/" + param_shard_name(r)), info[r].bytes);
      continue;
    }
    std::printf("[ full disk ] rank %d: %.160s\n", r, err[r].c_str());
    EXPECT_NE(err[r].find(param_shard_name(r)), std::string::npos) << err[r];
    EXPECT_TRUE(err[r].find("disk full?") != std::string::npos ||
                err[r].find("No space left") != std::string::npos)
        << err[r];
  }
}

}  // namespace
