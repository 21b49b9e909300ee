// Errors and check macros.
//
// Two kinds of failure, kept apart on purpose:
//  - ratchet::Error: bad input from a user (a flag, a file, a value). It is
//    thrown, caught once in main(), and printed as "ratchet: error: <what>"
//    with exit code 2. Its message names the file/flag/value and says what to
//    do next.
//  - a failing library call or broken invariant: the check macros below print
//    the statement's text, function, file:line, rank and the library's own
//    error string, then abort (llm.c / nccl-tests style). These are bugs or
//    environment faults, not user mistakes.
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
// ("cuda", "cublas", "nccl", "mpi", "hdf5", "assert"), `detail` is the
// library's own error string.
[[noreturn]] void check_failed(const char* lib, const char* stmt, const char* detail,
                               const char* func, const char* file, int line);

// The process's rank for messages; set by the communicator once known.
void set_log_rank(int rank);
int log_rank();

}  // namespace ratchet

// Internal invariant (not user input): prints and aborts when false.
#define RATCHET_ASSERT(cond)                                                                \
  do {                                                                                      \
    if (!(cond)) ::ratchet::check_failed("assert", #cond, "condition is false", __func__, \
                                         __FILE__, __LINE__);                               \
  } while (0)
