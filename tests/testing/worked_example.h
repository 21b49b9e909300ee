// The documented worked examples run as tests (docs/tokenizers.md's and
// docs/model-families.md's): the page's ```sh block after its
// "## Worked example" heading, and a replace that must match exactly once,
// so that a page cannot drift from what its test runs.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "testing/test_util.h"

namespace ratchet::testing {

// The ```sh block after `page`'s "## Worked example" heading ("" if none);
// `page` is relative to the source tree, e.g. "docs/tokenizers.md".
inline std::string worked_example_block(const std::string& page) {
  std::ifstream f(std::string(RATCHET_TESTS_DIR) + "/../" + page);
  std::string line, block;
  bool heading = false, in = false;
  while (std::getline(f, line)) {
    if (!heading) {
      heading = line.rfind("## Worked example", 0) == 0;
    } else if (!in) {
      in = line == "```sh";
    } else if (line == "```") {
      return block;
    } else {
      block += line + "\n";
    }
  }
  return "";
}

// Replaces `from` by `to` in `s`; `from` must occur exactly once.
inline void replace_once(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << "the worked example lost '" << from << "':\n" << s;
  ASSERT_EQ(s.find(from, at + 1), std::string::npos) << "'" << from << "' twice:\n" << s;
  s.replace(at, from.size(), to);
}

// Runs `block` as example.sh in `dir` with this build's ratchet first on PATH,
// as a reader would (bash -e -o pipefail).
inline RunResult run_worked_example(const std::string& dir, const std::string& block) {
  write_file(dir + "/example.sh", block);
  const std::string bin = std::filesystem::path(RATCHET_EXE).parent_path().string();
  return run_shell("cd " + dir + " && PATH=" + bin + ":$PATH bash -e -o pipefail example.sh");
}

}  // namespace ratchet::testing
