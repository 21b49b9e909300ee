// The fatal record (docs/resilience.md, "A dead rank"): what a rank that is
// dying writes as its last word, RUN_DIR/flight/fatal_rank_R.json, so that
// the Slurm wrapper can tell which rank (and node) died and of what:
//   {"rank": 1, "host": "rnode2", "job_id": "42", "pid": 4242,
//    "cause": "signal", "what": "SIGSEGV", "time": 1764420000}
//   {..., "cause": "library", "lib": "cuda", "what": "an illegal memory access ...", ...}
// Written by a handler of the fatal signals a process can catch (SIGSEGV,
// SIGBUS, SIGILL, SIGFPE, SIGABRT; only async-signal-safe calls: the JSON is
// rendered beforehand, the handler adds the signal and the time) and by
// check_failed() (core/error.h: a CUDA, cuBLAS, cuDNN, NCCL or MPI call that
// failed, an internal assertion), before it ends the job. A SIGKILL (the OOM
// killer, a node's agent) cannot be caught: the wrapper reads srun's own
// message about the task instead (report/dead_rank.h). The first fatal event
// of a process writes the record; a later one (the abort() that follows a
// failed check) does not overwrite it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet {

// Installs the handlers and the check_failed hook for this process: the
// record goes to DIR/fatal_rank_RANK.json ("" dir: nothing is installed).
// The handlers restore the disposition they replaced and re-raise, so the
// process still dies of its signal (and Open MPI's handler, installed by
// MPI_Init before this, still prints its backtrace).
void install_fatal_record(const std::string& dir, int rank, const std::string& host,
                          const std::string& job_id);
// Restores the previous handlers and removes the hook (the run ended).
void uninstall_fatal_record();
std::string fatal_record_path(const std::string& flight_dir, int rank);

struct FatalRecord {
  int rank = -1;
  std::string host;
  std::string job_id;
  std::string cause;  // "signal", "library"
  std::string lib;    // cause "library": "cuda", "cublas", "cudnn", "nccl", "mpi", "assert", ...
  std::string what;   // "SIGSEGV", or the library's message
  int64_t time = 0;   // Unix seconds
};

// DIR/flight/fatal_rank_*.json (or DIR/fatal_rank_*.json when DIR is the
// flight folder), any order; a damaged one is named in *damaged and left out.
std::vector<FatalRecord> read_fatal_records(const std::string& dir,
                                            std::vector<std::string>* damaged);

}  // namespace ratchet
