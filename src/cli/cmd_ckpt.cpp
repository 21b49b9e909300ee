// `ratchet ckpt list|inspect|verify|prune|export`: look after a checkpoint
// directory without starting a run.
#include <boost/program_options.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/run_lock.h"
#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "interop/hf_checkpoint.h"
#include "model/llmc_checkpoint.h"
#include "model/param_layout.h"
#include "train/tokenizer_checks.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace ratchet {

namespace {

const char* kUsage = R"(usage: ratchet ckpt <action> [options]

actions:
  list DIR                      every checkpoint in DIR: step, state, size, latest/best marks
  inspect CKPT                  a checkpoint's metadata: step, model, optimizer, data cursor,
                                run settings, counters
  verify CKPT|DIR               read every tensor and check its checksum, the manifest, that
                                the name agrees with the step inside, and that `latest` points
                                at a valid checkpoint; exit 1 on any problem
  prune DIR [--keep-last N] [--keep-every M]
                                delete valid checkpoints of the newest valid one's run outside
                                the policy (never that one, never the best, never an invalid
                                one or another run's); takes DIR's lock (refused while a
                                trainer writes there); exit 1 if something could not be removed
  export CKPT --output FILE [--overwrite]
                                write the parameters as an llm.c GPT-2 fp32 checkpoint
  export CKPT --format hf --output DIR [--dtype f32|bf16] [--overwrite]
                                write a Llama model as a Hugging Face checkpoint
                                (config.json + model.safetensors) for transformers

examples:
  ratchet ckpt list ckpt/
  ratchet ckpt verify ckpt/step_00001000
  ratchet ckpt prune ckpt/ --keep-last 2 --keep-every 5000
  ratchet ckpt export ckpt/step_00001000 --output gpt2_d12.bin
  ratchet ckpt export ckpt/step_00001000 --format hf --dtype bf16 --output llama_l6/
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
  if (m.param_shards > 0) {
    // Format 3: the manifest's shards (structure only; `verify` reads the data).
    const CheckpointReader r(path);
    std::printf("  shards           %zu (format 3, %.1f MB of tensors)\n", r.shards().size(),
                r.tensor_bytes() / 1e6);
    for (const auto& s : r.shards())
      std::printf("    %-16s rank %-5d %zu range(s), %zu elements, %llu bytes\n", s.name.c_str(),
                  s.rank, s.ranges.size(), ranges_length(s.ranges), (unsigned long long)s.bytes);
  } else {
    std::printf("  format           %d%s\n", m.optimizer_shards > 0 ? 2 : 1,
                m.optimizer_shards > 0
                    ? (" (" + std::to_string(m.optimizer_shards) + " optimizer shards)").c_str()
                    : "");
  }
  std::printf("  data cursor      epoch %llu, position %llu\n", (unsigned long long)m.cursor.epoch,
              (unsigned long long)m.cursor.position);
  if (!m.cursor.source_rows.empty()) {  // a mixture: rows drawn per --train-data source, in order
    std::printf("  rows per source ");
    for (uint64_t k : m.cursor.source_rows) std::printf(" %llu", (unsigned long long)k);
    std::printf("\n");
  }
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

// A step_* directory as CheckpointDir lists it (also one given by path).
CheckpointEntry entry_for(const std::string& path) {
  CheckpointEntry e;
  e.path = path;
  e.name = fs::path(path).lexically_normal().filename().string();
  if (e.name.empty()) e.name = fs::path(path).lexically_normal().parent_path().filename().string();
  e.committed = fs::exists(path + "/COMMITTED");
  if (e.name.rfind("step_", 0) == 0) {
    try {
      e.step = std::stoll(e.name.substr(5));
    } catch (const std::exception&) {
      e.step = -1;
    }
  } else {
    e.step = -1;  // not named by step: nothing to compare
  }
  return e;
}

// Why the checkpoint of entry `t` is not valid ("" when it is): every check
// `verify` makes, which `export` makes too (issue 25: export wrote a
// misnamed step directory that verify calls BAD).
std::string check_one(const CheckpointDir& cd, CheckpointEntry* e, Checkpoint* ck) {
  std::string why;
  if (e->step < 0) {  // a directory not named step_N: check all but the name
    why = !e->committed ? "no COMMITTED marker (a save that did not finish)" : "";
    if (why.empty()) {
      try {
        e->step = read_checkpoint_meta(e->path).step;
      } catch (const Error& x) {
        why = x.what();
      }
    }
  }
  if (why.empty()) why = cd.check_entry(*e, ck);
  return why;
}

int do_verify(const std::string& path) {
  std::vector<CheckpointEntry> targets;
  std::string dir = path;
  const bool single = fs::exists(path + "/state.h5") || fs::exists(path + "/COMMITTED");
  if (single) {
    targets.push_back(entry_for(path));
  } else {
    targets = CheckpointDir(path, false).list();
    if (targets.empty()) fail("no checkpoints in ", path);
  }
  CheckpointDir cd(single ? fs::path(path).lexically_normal().parent_path().string() : dir, false);
  int bad = 0;
  std::vector<std::string> valid;
  for (const auto& t : targets) {
    CheckpointEntry e = t;
    // Every byte read once, block by block: memory stays bounded (a few MB)
    // whatever the checkpoint's size (checkpoint_reader.h).
    const std::string why = check_one(cd, &e, nullptr);
    if (why.empty()) {
      const CheckpointMeta m = read_checkpoint_meta(t.path);
      std::printf("ok         %s (step %lld, %zu parameters, %s, checksums match)\n",
                  t.path.c_str(), (long long)m.step, ParamLayout(m.model).total,
                  m.param_shards > 0 ? (std::to_string(m.param_shards) + " shard(s)").c_str()
                  : m.optimizer_shards > 0 ? "format 2" : "format 1");
      valid.push_back(e.name);
    } else {
      std::printf("%-10s %s: %s\n", e.committed ? "BAD" : "INCOMPLETE", t.path.c_str(),
                  why.c_str());
      bad++;
    }
  }
  // `latest` must name a valid checkpoint (a resume trusts the scan, but
  // people and scripts read `latest`).
  if (!single && fs::exists(dir + "/latest")) {
    const std::string latest = latest_name(dir);
    if (!fs::is_directory(dir + "/" + latest)) {
      std::printf("DANGLING   %s/latest -> '%s': no such checkpoint\n", dir.c_str(), latest.c_str());
      bad++;
    } else if (std::find(valid.begin(), valid.end(), latest) == valid.end()) {
      std::printf("BAD        %s/latest -> %s, which is not valid (see above)\n", dir.c_str(),
                  latest.c_str());
      bad++;
    }
  }
  return bad ? kExitFailure : kExitOk;
}

int do_prune(const std::string& dir, int keep_last, int keep_every) {
  if (keep_last < 1)
    fail("--keep-last must be at least 1 (got ", keep_last, "): the newest valid checkpoint is "
         "always kept");
  if (keep_every < 0) fail("--keep-every must be >= 0 (got ", keep_every, ")");
  CheckpointDir cd(dir, false);
  // Only a checkpoint directory is pruned (and locked): one that holds a
  // step_* checkpoint, `latest`, a leftover .tmp-step_* of a save, or a lock
  // file held now (a trainer that has not saved yet: the lock below names
  // it). Anything else (a run directory, a home directory) is refused before
  // a lock file is made in it.
  std::error_code ec;
  bool is_ckpt_dir = !cd.list().empty();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n == "latest" || n.rfind(".tmp-step_", 0) == 0) is_ckpt_dir = true;
  }
  if (!is_ckpt_dir) {
    const int fd = open((fs::path(dir) / RunLock::kFileName).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      is_ckpt_dir = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
      close(fd);
    }
  }
  if (!is_ckpt_dir) {
    const std::string inner = (fs::path(dir) / "ckpt").string();
    fail("ckpt prune: ", dir, " is not a checkpoint directory (no step_* checkpoint, no `latest`)",
         fs::is_directory(inner, ec) ? "; the run's checkpoints may be in " + inner + ": pass that"
                                     : ": pass the --ckpt-dir of a run (RUN_DIR/ckpt with --run-dir)");
  }
  // Never under a running trainer; the lock file is removed again if this
  // made it (a trainer's stays, emptied).
  RunLock lock(dir, "ckpt prune", "checkpoint directory", /*remove_created=*/true);
  RetentionPolicy keep;
  keep.keep_last = keep_last;
  keep.keep_every = keep_every;
  auto entries = cd.list();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (cd.check_entry(*it).empty()) {
      keep.best_step = read_checkpoint_meta(it->path).best_step;
      break;
    }
  const PruneResult r = cd.prune(keep);
  for (const auto& p : r.removed) std::printf("removed %s\n", p.c_str());
  for (const auto& p : r.kept_invalid) std::printf("kept (invalid, not counted) %s\n", p.c_str());
  for (const auto& p : r.failed) std::printf("FAILED to remove %s\n", p.c_str());
  std::printf("%zu removed%s\n", r.removed.size(),
              r.failed.empty() ? "" : (", " + std::to_string(r.failed.size()) + " could not be removed").c_str());
  return r.failed.empty() ? kExitOk : kExitFailure;
}

// The checkpoint at `path`, if `verify` would call it ok; else an Error
// saying why. Only the parameters are read (assembled shard by shard into one
// buffer of P floats): never the moments.
Checkpoint read_verified(const std::string& path) {
  read_checkpoint_meta(path);  // a --ckpt-dir or a non-checkpoint, said as such
  CheckpointEntry e = entry_for(path);
  const CheckpointDir cd(fs::path(path).lexically_normal().parent_path().string(), false);
  const std::string why = check_one(cd, &e, nullptr);
  if (!why.empty())
    fail("ckpt export: ", path, " is not a valid checkpoint (`ratchet ckpt verify` calls it ",
         e.committed ? "BAD" : "INCOMPLETE", "): ", why);
  const CheckpointReader r(path);
  Checkpoint ck;
  ck.meta = r.meta();
  ck.params.resize(r.num_params());
  r.read(0, 0, r.num_params(), ck.params.data());
  return ck;
}

int do_export(const std::string& path, const std::string& out, bool overwrite, const std::string& format,
              const std::string& dtype) {
  if (format != "llmc" && format != "hf") fail("--format must be llmc or hf (got '", format, "')");
  if (format == "hf") {
    if (out.empty()) fail("ckpt export --format hf needs --output DIR");
    const StDtype dt = parse_export_dtype("--dtype", dtype);
    check_hf_export_dir("--output", out, overwrite);
    Checkpoint ck = read_verified(path);
    save_hf_checkpoint(out, ck.meta.model, ck.params, dt, overwrite, 5'000'000'000ull, ck.meta.moe_bias);
    std::printf("wrote %s (Hugging Face Llama, config.json + safetensors %s, step %lld)\n", out.c_str(),
                st_dtype_name(dt), (long long)ck.meta.step);
    // A complete model directory: the training shards' tokenizer files beside the weights.
    std::string why;
    const std::string tok_dir = checkpoint_tokenizer_source(ck.meta.identity, &why);
    if (tok_dir.empty()) {
      std::printf("no tokenizer files written: %s\n", why.c_str());
    } else {
      std::string files;
      for (const auto& f : copy_tokenizer_files(tok_dir, out)) files += " " + f;
      std::printf("wrote%s (from %s)\n", files.c_str(), tok_dir.c_str());
    }
    return kExitOk;
  }
  if (out.empty()) fail("ckpt export needs --output FILE");
  if (fs::exists(out) && !overwrite)
    fail("--output ", out, " already exists: pass --overwrite to replace it, or choose another name");
  Checkpoint ck = read_verified(path);
  save_llmc_checkpoint(out, ck.meta.model, ck.params);
  std::printf("wrote %s (llm.c GPT-2 fp32, step %lld)\n", out.c_str(), (long long)ck.meta.step);
  return kExitOk;
}

}  // namespace

int cmd_ckpt(int argc, char** argv) {
  std::string action, target, output, format = "llmc", dtype = "f32";
  int keep_last = 3, keep_every = 0;
  bool overwrite = false;
  po::options_description desc("ratchet ckpt options");
  desc.add_options()("help,h", "print this help")(
      "output,o", po::value(&output), "export: the llm.c file (or, --format hf, directory) to write")(
      "format", po::value(&format)->default_value(format),
      "export: llmc (llm.c GPT-2 .bin) or hf (Hugging Face, the model's family: config.json + safetensors)")(
      "dtype", po::value(&dtype)->default_value(dtype), "export --format hf: f32 (exact) or bf16")(
      "overwrite", po::bool_switch(&overwrite), "export: replace an existing --output file or export")(
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
  if (action == "export") return do_export(target, output, overwrite, format, dtype);
  fail("unknown ckpt action '", action, "': use list, inspect, verify, prune or export");
}

}  // namespace ratchet
