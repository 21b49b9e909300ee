// Comments cite files that exist. Every source file under src/, kernels/ and
// data_tools/ (.h .cpp .cu .cuh .inc) is read, its comments (// and /* */,
// not string literals) scanned for source paths (NAME.h, NAME.cpp, NAME.cu,
// NAME.cuh, NAME.inc, with or without folders), and each one must resolve:
//   - a path with a folder: from the repository root, from src/ (how the
//     code includes, "ckpt/checkpoint.h"), or from the citing file's folder;
//   - a bare name: in the citing file's folder, or the name of exactly one
//     file in the repository (so the reader can find it);
//   - or be a library's header (kLibraryHeaders below).
// A file moved or renamed without its citations fails here, naming the
// citing file, the line and the path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = fs::path(RATCHET_TESTS_DIR).parent_path();

// Headers of the libraries ratchet builds against, cited by what they declare.
const std::set<std::string> kLibraryHeaders = {
    "cblas.h", "cublasLt.h", "cudnn_graph.h", "mpi.h", "nccl.h",
    // cudnn-frontend's, whose lowering cudnn_attention.cpp writes out in C
    "node/scaled_dot_product_flash_attention.h", "node/softmax.h", "node/diagonal_band_mask.h"};

bool is_source(const fs::path& p) {
  static const std::set<std::string> exts = {".h", ".cpp", ".cu", ".cuh", ".inc"};
  return exts.count(p.extension().string()) > 0;
}

// The comments of C++ source text, each with the line it starts on. String
// and character literals are skipped, so that "a.h" in code is not a comment.
std::vector<std::pair<int, std::string>> comments(const std::string& t) {
  std::vector<std::pair<int, std::string>> out;
  int line = 1;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, 2, "//") == 0) {
      size_t j = t.find('\n', i);
      if (j == std::string::npos) j = t.size();
      out.push_back({line, t.substr(i, j - i)});
      i = j;
    } else if (t.compare(i, 2, "/*") == 0) {
      size_t j = t.find("*/", i + 2);
      j = j == std::string::npos ? t.size() : j + 2;
      const std::string c = t.substr(i, j - i);
      out.push_back({line, c});
      for (char ch : c) line += ch == '\n';
      i = j;
    } else if (t[i] == '"' || t[i] == '\'') {
      // A raw string R"(...)" may hold anything up to )".
      if (t[i] == '"' && i > 0 && t[i - 1] == 'R') {
        const size_t open = t.find('(', i);
        const std::string close = ")" + t.substr(i + 1, open - i - 1) + "\"";
        size_t j = t.find(close, open);
        j = j == std::string::npos ? t.size() : j + close.size();
        for (size_t k = i; k < j; k++) line += t[k] == '\n';
        i = j;
        continue;
      }
      const char q = t[i];
      size_t j = i + 1;
      while (j < t.size() && t[j] != q && t[j] != '\n') j += t[j] == '\\' ? 2 : 1;
      i = j + 1;
    } else {
      line += t[i] == '\n';
      i++;
    }
  }
  return out;
}

// Every file name in the repository's source trees, and how often it occurs.
std::map<std::string, int> file_name_counts() {
  std::map<std::string, int> n;
  for (const char* dir : {"src", "kernels", "data_tools", "tests", "bench", "scripts", "slurm",
                          "modules", "cmake", "packaging", "docs", "tools"}) {
    std::error_code ec;
    if (!fs::is_directory(kRoot / dir, ec)) continue;
    for (const auto& e : fs::recursive_directory_iterator(kRoot / dir))
      if (e.is_regular_file()) n[e.path().filename().string()]++;
  }
  return n;
}

// Why `cited` (in a comment of `file`) does not resolve; "" when it does.
std::string unresolved(const fs::path& file, const std::string& cited,
                       const std::map<std::string, int>& names) {
  if (kLibraryHeaders.count(cited)) return "";
  std::error_code ec;
  const fs::path here = file.parent_path();
  if (fs::exists(here / cited, ec)) return "";
  if (cited.find('/') != std::string::npos) {
    if (fs::exists(kRoot / cited, ec) || fs::exists(kRoot / "src" / cited, ec)) return "";
    return "no such file (looked from the root, src/ and " +
           fs::relative(here, kRoot).string() + "/)";
  }
  const auto it = names.find(cited);
  if (it == names.end()) return "no file of that name in the repository";
  if (it->second > 1)
    return std::to_string(it->second) + " files have that name: cite it with its folder";
  return "";
}

std::vector<std::string> cited_paths(const std::string& comment) {
  // A path: name characters and folders, then a source extension, not part
  // of a longer word or path (e.g. "llm.c" alone is not one, nor "x.hpp").
  static const std::regex path(R"((^|[^A-Za-z0-9_./-])([A-Za-z0-9_][A-Za-z0-9_./-]*\.(h|cpp|cuh|cu|inc))(?![A-Za-z0-9_]))");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(comment.begin(), comment.end(), path);
       it != std::sregex_iterator(); ++it)
    out.push_back((*it)[2].str());
  return out;
}

TEST(CitedPaths, TheScannerFindsPathsInCommentsOnly) {
  const auto c = comments(
      "#include \"a/b.h\"  // see ckpt/checkpoint.h and x.cpp.\n"
      "const char* s = \"not/a_comment.h\"; /* multi\n line c.cuh */ int q = '\"';\n"
      "// after the char literal: y.inc, not llm.c or z.hpp\n");
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].first, 1);
  EXPECT_EQ(cited_paths(c[0].second), (std::vector<std::string>{"ckpt/checkpoint.h", "x.cpp"}));
  EXPECT_EQ(c[1].first, 2);
  EXPECT_EQ(cited_paths(c[1].second), (std::vector<std::string>{"c.cuh"}));
  EXPECT_EQ(c[2].first, 4);
  EXPECT_EQ(cited_paths(c[2].second), (std::vector<std::string>{"y.inc"}));
}

TEST(CitedPaths, TheRulesRefuseWhatDoesNotExist) {
  const auto names = file_name_counts();
  const fs::path from = kRoot / "src/train/trainer.cpp";
  EXPECT_EQ(unresolved(from, "ckpt/checkpoint.h", names), "");      // from src/
  EXPECT_EQ(unresolved(from, "src/ckpt/checkpoint.h", names), "");  // from the root
  EXPECT_EQ(unresolved(from, "trainer.h", names), "");              // the same folder
  EXPECT_EQ(unresolved(from, "young_daly.h", names), "");           // one file of that name
  EXPECT_NE(unresolved(from, "ckpt/no_such_file.h", names), "");
  EXPECT_NE(unresolved(from, "no_such_file.cpp", names), "");
  EXPECT_NE(unresolved(from, "CMakeLists.h", names), "");
}

TEST(CitedPaths, EverySourceCommentCitesAFileThatExists) {
  const auto names = file_name_counts();
  std::ostringstream bad;
  int files = 0, citations = 0;
  for (const char* dir : {"src", "kernels", "data_tools"}) {
    for (const auto& e : fs::recursive_directory_iterator(kRoot / dir)) {
      if (!e.is_regular_file() || !is_source(e.path())) continue;
      files++;
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      for (const auto& [line, text] : comments(ss.str()))
        for (const std::string& cited : cited_paths(text)) {
          citations++;
          const std::string why = unresolved(e.path(), cited, names);
          if (!why.empty())
            bad << "\n  " << fs::relative(e.path(), kRoot).string() << ":" << line << ": "
                << cited << ": " << why;
        }
    }
  }
  EXPECT_GT(files, 100);     // the scan saw the tree
  EXPECT_GT(citations, 100);  // and the comments' citations
  EXPECT_EQ(bad.str(), "") << "comments cite files that do not resolve (fix the path, or "
                              "name a library header in kLibraryHeaders):"
                           << bad.str();
}

}  // namespace
