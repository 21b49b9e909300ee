// `ratchet`: one executable, git-style subcommands.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/fault.h"
#include "data_tools/commands.h"
#include "train/stop_signals.h"
#include "version.h"
#ifdef RATCHET_REGISTER_NCCL
#include "distributed/nccl_communicator.h"
#endif

namespace {

struct Subcommand {
  const char* name;
  int (*fn)(int, char**);
  const char* summary;
};

const Subcommand kCommands[] = {
    {"train", ratchet::cmd_train, "train a GPT-2, Llama, 2026-family or MoE model (CPU or CUDA, MPI ranks)"},
    {"shard", ratchet::cmd_shard, "tokenize text into HDF5 token shards"},
    {"inspect", ratchet::cmd_inspect, "summarize token shards; --decode prints their text"},
    {"verify", ratchet::cmd_verify, "check token shards: schema, ids, offsets, every chunk"},
    {"convert", ratchet::cmd_convert, "llm.c token files <-> HDF5 token shards"},
    {"tokenize", ratchet::cmd_tokenize, "print the ids and pieces a tokenizer gives a text"},
    {"ckpt", ratchet::cmd_ckpt, "list, inspect, verify, prune or export checkpoints"},
    {"plan", ratchet::cmd_plan, "before a run: compute-optimal size, memory, step time, cost"},
    {"report", ratchet::cmd_report, "after a run: summary of the log and ledger, loss plots"},
    {"doctor", ratchet::cmd_doctor, "after a hang: which rank stopped where (flight records)"},
    {"sweep", ratchet::cmd_sweep, "budgeted hyperparameter sweeps (ASHA) of preemptible trials"},
    {"eval", ratchet::cmd_eval, "a model on multiple-choice tasks (HellaSwag) and token shards"},
    {"sample", ratchet::cmd_sample, "text from a trained model, decoded with its tokenizer"},
};

void usage(FILE* out) {
  std::fprintf(out,
               "ratchet %s: train GPT-style transformers on Slurm clusters\n\n"
               "usage: ratchet <command> [options]     (ratchet <command> --help for more)\n\n"
               "commands:\n",
               RATCHET_VERSION);
  for (const auto& c : kCommands) std::fprintf(out, "  %-8s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\nexamples:\n"
               "  ratchet shard --tokenizer byte --input book.txt --output-dir data/\n"
               "  ratchet train --model d6 --train-data 'data/train_*.h5' --val-data "
               "'data/val_*.h5' --steps 200\n");
}

// A sweep trial (RATCHET_SWEEP_EXIT_FILE, set by the sweep controller) writes
// its own exit code there, whole (by rename), so that a controller restarted
// while it ran finds how it ended (it is not the trainer's parent then).
void publish_exit_code(int code) {
  const char* path = std::getenv("RATCHET_SWEEP_EXIT_FILE");
  if (!path || !*path) return;
  const std::string tmp = std::string(path) + ".trainer.tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    const bool ok = std::fprintf(f, "%d\n", code) > 0;
    if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), path);
    else std::remove(tmp.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  // `ratchet train`: the stop signals only set a flag from the first line on
  // (a Slurm preemption in the first milliseconds must still save and requeue,
  // not kill); --preempt-signal is added once the flags are read.
  if (argc >= 2 && !std::strcmp(argv[1], "train")) {
    ratchet::install_stop_signals("USR1");
    ratchet::fault_point("start");
  }
#if defined(RATCHET_REGISTER_CUDA_BACKEND) || defined(RATCHET_REGISTER_SIMT_BACKEND)
  ratchet::register_cuda_backend();  // --device cuda (or simt)
#endif
#ifdef RATCHET_REGISTER_NCCL
  ratchet::register_nccl_communicator();  // gradients of the cuda backend across ranks
#endif
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? ratchet::kExitUsage : ratchet::kExitOk;
  }
  if (!std::strcmp(argv[1], "--version")) {
    // The second line says which optional parts this build has, so scripts
    // (scripts/gpu-check.sh) can tell "not built with MPI" from a failure.
    std::printf("ratchet %s\nbuilt with: MPI %s, CUDA backend %s, NCCL %s\n", RATCHET_VERSION,
#ifdef RATCHET_HAVE_MPI
                "yes",
#else
                "no",
#endif
#if defined(RATCHET_REGISTER_CUDA_BACKEND)
                "yes",
#elif defined(RATCHET_REGISTER_SIMT_BACKEND)
                "simt",
#else
                "no",
#endif
#ifdef RATCHET_REGISTER_NCCL
                "yes"
#else
                "no"
#endif
    );
    return ratchet::kExitOk;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    int code;
    try {
      code = c.fn(argc - 1, argv + 1);
    } catch (const ratchet::Error& e) {
      std::fprintf(stderr, "ratchet %s: error: %s\n", c.name, e.what());
      code = ratchet::kExitUsage;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ratchet %s: error: %s\n", c.name, e.what());
      code = ratchet::kExitFailure;
    }
    publish_exit_code(code);
    return code;
  }
  std::fprintf(stderr, "ratchet: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return ratchet::kExitUsage;
}
