// packaging/: the Spack recipe and the EasyBuild easyconfig cannot be run
// here (neither tool is installed), so this checks what can be checked: both
// files are valid Python, and every CMake option they pass is one that the
// tree's CMake files declare (option() or a CACHE variable), so a renamed or
// removed option breaks this test instead of a cluster build.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "testing/test_util.h"

namespace fs = std::filesystem;
using namespace ratchet::testing;

namespace {

const std::string kRoot = std::string(RATCHET_TESTS_DIR) + "/..";

// Every option(NAME ...) and set(NAME ... CACHE ...) in the tree's CMake files.
std::set<std::string> declared_cmake_options() {
  std::set<std::string> names;
  const std::regex decl(R"((?:option|set)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\b([^)]*))");
  for (auto it = fs::recursive_directory_iterator(kRoot); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::directory_entry& e = *it;
    const std::string p = e.path().string();
    const std::string file = e.path().filename().string();
    if (e.is_directory() && (file.rfind("build", 0) == 0 || file[0] == '.' || file == "demo-run")) {
      it.disable_recursion_pending();  // build trees, .git, the demo's output
      continue;
    }
    if (file != "CMakeLists.txt" && e.path().extension() != ".cmake") continue;
    const std::string text = read_file(p);
    for (std::sregex_iterator m(text.begin(), text.end(), decl), end; m != end; ++m) {
      const std::string call = m->str(0);
      if (call.rfind("option", 0) == 0 || (*m)[2].str().find("CACHE") != std::string::npos)
        names.insert((*m)[1]);
    }
  }
  return names;
}

std::set<std::string> passed_options(const std::string& file) {
  RunResult r = run_shell("python3 " + std::string(RATCHET_TESTS_DIR) +
                          "/data/packaging_cmake_options.py " + file);
  EXPECT_EQ(r.exit_code, 0) << file << " is not valid Python:\n" << r.output;
  std::set<std::string> names;
  std::istringstream ss(r.output);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) names.insert(line);
  return names;
}

void expect_declared(const std::string& file) {
  const std::set<std::string> declared = declared_cmake_options();
  ASSERT_TRUE(declared.count("RATCHET_CUDA")) << "the CMake scan found no RATCHET_CUDA";
  const std::set<std::string> passed = passed_options(file);
  // Each recipe sets at least the backend switches and the architectures.
  for (const char* must : {"RATCHET_CUDA", "RATCHET_MPI", "RATCHET_NATIVE",
                           "CMAKE_CUDA_ARCHITECTURES"})
    EXPECT_TRUE(passed.count(must)) << file << " does not pass " << must;
  for (const std::string& name : passed)
    EXPECT_TRUE(declared.count(name))
        << file << " passes -D" << name << ", which no CMakeLists.txt or .cmake file declares";
}

}  // namespace

TEST(Packaging, SpackRecipePassesOnlyDeclaredCmakeOptions) {
  expect_declared(kRoot + "/packaging/spack/package.py");
}

TEST(Packaging, EasyconfigPassesOnlyDeclaredCmakeOptions) {
  std::string eb;
  for (const auto& e : fs::directory_iterator(kRoot + "/packaging/easybuild"))
    if (e.path().extension() == ".eb") eb = e.path().string();
  ASSERT_FALSE(eb.empty()) << "no .eb file in packaging/easybuild";
  expect_declared(eb);
}

// The checker itself: a syntax error and an undeclared option are caught.
TEST(Packaging, CheckerCatchesBadRecipes) {
  TempDir dir;
  write_file(dir / "bad.py", "def cmake_args(self):\n  return [self.define(\"X\", 1)\n");
  RunResult r = run_shell("python3 " + std::string(RATCHET_TESTS_DIR) +
                          "/data/packaging_cmake_options.py " + (dir / "bad.py"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  write_file(dir / "new.eb", "configopts = '-DRATCHET_NO_SUCH_OPTION=ON -DRATCHET_MPI=ON'\n");
  const std::set<std::string> passed = passed_options(dir / "new.eb");
  EXPECT_EQ(passed, (std::set<std::string>{"RATCHET_MPI", "RATCHET_NO_SUCH_OPTION"}));
  EXPECT_FALSE(declared_cmake_options().count("RATCHET_NO_SUCH_OPTION"));
}
