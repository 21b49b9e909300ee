// `ratchet ckpt list|inspect|verify|prune|export`: look after a checkpoint
// directory without starting a run.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "model/llmc_checkpoint.h"
#include "model/param_layout.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace ratchet {

namespace {

const char* kUsage = R"(usage: ratchet ckpt <action> [options]

actions:
  list DIR                      every checkpoint in DIR: step, state, size, latest/best marks
  inspect CKPT                  a checkpoint's metadata: step, model, optimizer, data cursor,
                                run settings, counters
  verify CKPT|DIR               read every tensor and check its checksum; exit 1 on a bad one
  prune DIR [--keep-last N] [--keep-every M]
                                delete checkpoints outside the policy (never the newest
                                committed one, never the best)
  export CKPT --output FILE     write the parameters as an llm.c GPT-2 fp32 checkpoint

examples:
  ratchet ckpt list ckpt/
  ratchet ckpt verify ckpt/step_00001000
  ratchet ckpt prune ckpt/ --keep-last 2 --keep-every 5000
  ratchet ckpt export ckpt/step_00001000 --output gpt2_d12.bin
)";

std::string latest_name(const std::string& dir) {
  std::ifstream f(dir + "/latest");
  std::string s;
  std::getline(f, s);
  return s;
}

int do_list(const std::string& dir) {
  CheckpointDir cd(dir, false);
  auto entries = cd.list();
  if (entries.empty()) {
    std::printf("no checkpoints in %s\n", dir.c_str());
    return kExitOk;
  }
  const std::string latest = latest_name(dir);
  int64_t best = -1;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->committed) {
      try {
        best = read_checkpoint_meta(it->path).best_step;
      } catch (const Error&) {
      }
      break;
    }
  std::printf("%-16s %10s %12s  %s\n", "name", "step", "size", "state");
  for (const auto& e : entries) {
    std::string state = e.committed ? "committed" : "INCOMPLETE (never loaded)";
    if (e.name == latest) state += ", latest";
    if (e.step == best) state += ", best";
    std::printf("%-16s %10lld %10.1f MB  %s\n", e.name.c_str(), (long long)e.step,
                directory_bytes(e.path) / 1e6, state.c_str());
  }
  return kExitOk;
}

int do_inspect(const std::string& path) {
  CheckpointMeta m = read_checkpoint_meta(path);
  std::printf("checkpoint %s\n", path.c_str());
  std::printf("  committed        %s\n", fs::exists(path + "/COMMITTED") ? "yes" : "NO");
  std::printf("  step             %lld\n", (long long)m.step);
  std::printf("  model            %s (%zu parameters)\n", m.model.describe().c_str(),
              ParamLayout(m.model).total);
  std::printf("  adam step        %d\n", m.adam_t);
  std::printf("  data cursor      epoch %llu, position %llu\n", (unsigned long long)m.cursor.epoch,
              (unsigned long long)m.cursor.position);
  if (std::isfinite(m.best_val_loss))
    std::printf("  best val loss    %.4f at step %lld\n", m.best_val_loss, (long long)m.best_step);
  std::printf("  identity (must match to resume):\n");
  for (const auto& [k, v] : m.identity) std::printf("    %-20s %s\n", k.c_str(), v.c_str());
  std::printf("  settings (may change on resume):\n");
  for (const auto& [k, v] : m.settings) std::printf("    %-20s %s\n", k.c_str(), v.c_str());
  if (!m.counters.empty()) {
    std::printf("  counters:\n");
    for (const auto& [k, v] : m.counters) std::printf("    %-20s %.6g\n", k.c_str(), v);
  }
  return kExitOk;
}

int do_verify(const std::string& path) {
  std::vector<std::string> targets;
  if (fs::exists(path + "/state.h5")) {
    targets.push_back(path);
  } else {
    for (const auto& e : CheckpointDir(path, false).list()) targets.push_back(e.path);
    if (targets.empty()) fail("no checkpoints in ", path);
  }
  int bad = 0;
  for (const auto& t : targets) {
    if (!fs::exists(t + "/COMMITTED")) {
      std::printf("INCOMPLETE %s: no COMMITTED marker (a save that did not finish)\n", t.c_str());
      bad++;
      continue;
    }
    try {
      Checkpoint ck = read_checkpoint(t);
      std::printf("ok         %s (step %lld, %zu parameters, checksums match)\n", t.c_str(),
                  (long long)ck.meta.step, ck.params.size());
    } catch (const Error& e) {
      std::printf("BAD        %s: %s\n", t.c_str(), e.what());
      bad++;
    }
  }
  return bad ? kExitFailure : kExitOk;
}

int do_prune(const std::string& dir, int keep_last, int keep_every) {
  CheckpointDir cd(dir, false);
  RetentionPolicy keep;
  keep.keep_last = keep_last;
  keep.keep_every = keep_every;
  auto entries = cd.list();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->committed) {
      keep.best_step = read_checkpoint_meta(it->path).best_step;
      break;
    }
  auto removed = cd.prune(keep);
  for (const auto& r : removed) std::printf("removed %s\n", r.c_str());
  std::printf("%zu removed\n", removed.size());
  return kExitOk;
}

int do_export(const std::string& path, const std::string& out) {
  if (out.empty()) fail("ckpt export needs --output FILE");
  Checkpoint ck = read_checkpoint(path);
  save_llmc_checkpoint(out, ck.meta.model, ck.params);
  std::printf("wrote %s (llm.c GPT-2 fp32, step %lld)\n", out.c_str(), (long long)ck.meta.step);
  return kExitOk;
}

}  // namespace

int cmd_ckpt(int argc, char** argv) {
  std::string action, target, output;
  int keep_last = 3, keep_every = 0;
  po::options_description desc("ratchet ckpt options");
  desc.add_options()("help,h", "print this help")(
      "output,o", po::value(&output), "export: the llm.c file to write")(
      "keep-last", po::value(&keep_last)->default_value(keep_last), "prune: newest N kept")(
      "keep-every", po::value(&keep_every)->default_value(keep_every),
      "prune: also keep multiples of this step")(
      "action", po::value(&action), "")("target", po::value(&target), "");
  po::positional_options_description pos;
  pos.add("action", 1).add("target", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "ckpt", &pos, true))
    return kExitUsage;
  if (vm.count("help") || action.empty()) {
    std::cout << kUsage;
    return action.empty() && !vm.count("help") ? kExitUsage : kExitOk;
  }
  if (target.empty()) fail("ckpt ", action, " needs a checkpoint or directory argument");
  if (!fs::exists(target)) fail("ckpt ", action, ": ", target, " does not exist");
  if (action == "list") return do_list(target);
  if (action == "inspect") return do_inspect(target);
  if (action == "verify") return do_verify(target);
  if (action == "prune") return do_prune(target, keep_last, keep_every);
  if (action == "export") return do_export(target, output);
  fail("unknown ckpt action '", action, "': use list, inspect, verify, prune or export");
}

}  // namespace ratchet
