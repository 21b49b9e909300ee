// Errors and the check-macro family.
//
// Two kinds of failure, kept apart on purpose:
//  - ratchet::Error: bad input from a user (a flag, a file, a value). It is
//    thrown, caught once in main(), and printed as "ratchet: error: <what>"
//    with exit code 2. Its message names the file/flag/value and says what to
//    do next. HDF5 calls on a user's file belong here: H5_CHECK
//    (data/h5_util.h) throws Error with HDF5's own message, since a truncated
//    shard is a user's problem, not a bug.
//  - a failing library call or broken invariant: the check macros print the
//    statement's text, function, file:line, rank, host, device and the
//    library's own error string, then abort (llm.c / nccl-tests style). These
//    are bugs or environment faults, not user mistakes.
//
// The family: every macro is RATCHET_CHECK_STATUS with the library's success
// value and error-string function, and ends in check_failed(), the one reporter:
//   cudaCheck     core/cuda_check.h   (kernels, the cuda backend, NCCL's device calls)
//   cublasCheck   backend/cuda/matmul.cpp
//   cudnnCheck    backend/cuda/cudnn_attention.cpp
//   ncclCheck     distributed/nccl_communicator.h
//   mpiCheck      distributed/mpi_communicator.h
//   RATCHET_ASSERT, RATCHET_REQUIRE (kernels/common.cuh): invariants
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ratchet {

struct Error : std::runtime_error {
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Builds a message from any streamable pieces: fail("shard ", path, " is empty").
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw Error(os.str());
}

// The one reporter every check macro ends in. `lib` names the library
// ("cuda", "cublas", "nccl", "mpi", "assert", ...), `detail` is the library's
// own error string. Prints where (where_am_i()), runs the fatal hook (MPI_Abort
// when MPI is up, so that the whole job ends), then aborts.
[[noreturn]] void check_failed(const char* lib, const char* stmt, const std::string& detail,
                               const char* func, const char* file, int line);

// "rank R of W, host H" (and ", device D" once a device probe is set): the
// one description of where a message comes from, for check_failed() and
// report_rank_error().
std::string where_am_i();

// A run on more than one rank failed on this rank with `what`: prints
//   "<command>: error on rank R of W (host H): <what>"
//   "<command>: rank R is ending the job (exit code C)"
// so that the job's log names the rank whatever the others were doing.
void report_rank_error(const char* command, const std::string& what, int exit_code);

// The process's rank and world size for messages; set by the communicator.
void set_log_rank(int rank, int world = 1);
int log_rank();
// The current device for messages (-1: none); set by the cuda backend.
void set_device_probe(int (*probe)());
// Run by check_failed() before it aborts (the MPI communicator: MPI_Abort).
void set_fatal_hook(void (*hook)());

}  // namespace ratchet

// The check-macro family: evaluates `stmt` once; when its status is not
// `success`, reports describe(status) through check_failed(). `describe` is a
// function (or function object) from the library's status to its text.
#define RATCHET_CHECK_STATUS(lib, stmt, success, describe)                                 \
  do {                                                                                     \
    const auto ratchet_status_ = (stmt);                                                   \
    if (ratchet_status_ != (success))                                                      \
      ::ratchet::check_failed(lib, #stmt, describe(ratchet_status_), __func__, __FILE__,   \
                              __LINE__);                                                   \
  } while (0)

// Internal invariant (not user input): prints and aborts when false.
#define RATCHET_ASSERT(cond)                                                                \
  do {                                                                                      \
    if (!(cond)) ::ratchet::check_failed("assert", #cond, "condition is false", __func__, \
                                         __FILE__, __LINE__);                               \
  } while (0)
