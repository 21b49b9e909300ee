// Shared test helpers: temporary directories, running the ratchet binary,
// comparing float arrays.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/json.h"

namespace ratchet::testing {

// A fresh directory under $TMPDIR (or /tmp), removed when the object dies.
struct TempDir {
  std::string path;
  TempDir();
  ~TempDir();
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr, interleaved
};
// Runs `ratchet ARGS` (a shell-quoted string) and captures its output.
RunResult run_ratchet(const std::string& args);
// Runs a shell command and captures its output.
RunResult run_shell(const std::string& cmd);

void write_file(const std::string& path, const std::string& text);

// Shards a passage of the King James Bible (Debian's bible-kjv, e.g.
// "Gen1:1-Gen5:32") with the byte tokenizer into DIR/data/{train,val}_*.h5
// (10% validation). Returns "" on success, else what failed.
std::string shard_bible(const TempDir& dir, const std::string& passage);
std::string read_file(const std::string& path);
// Overwrites 16 bytes in the middle of the stored (compressed) chunk of
// /tokens that holds token `first`, as a damaged disk would.
void corrupt_token_chunk(const std::string& path, unsigned long long first);

// JSON files as ratchet writes them, read with nlohmann-json (a test fails
// with the parse error when they are not JSON): one document, or one object
// per non-blank line.
nlohmann::json read_json_file(const std::string& path);
std::vector<nlohmann::json> read_jsonl(const std::string& path);
// The numbers under `key` in the JSONL lines that have it, in order.
std::vector<double> jsonl_values(const std::string& path, const std::string& key);

// The losses `ratchet train` printed, in order: its "step N | loss X | ..."
// lines (the JSONL log has them too: jsonl_values(path, "loss")).
std::vector<double> printed_losses(const std::string& output);
// The program `name` built beside `exe` (a test's RATCHET_EXE): ratchet-simt,
// ratchet-stub-nccl.
std::string sibling_program(const std::string& exe, const std::string& name);

// Wall-clock seconds (steady clock).
double now_seconds();

// Max |a-b| over the arrays and normalized mean squared error sum (a-b)^2 / sum b^2.
double max_abs_diff(const float* a, const float* b, size_t n);
double nmse(const float* a, const float* ref, size_t n);

}  // namespace ratchet::testing
