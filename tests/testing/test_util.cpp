#include "testing/test_util.h"

#include <hdf5.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "data/h5_util.h"

namespace ratchet::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ratchet-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

RunResult run_shell(const std::string& cmd) {
  RunResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

RunResult run_ratchet(const std::string& args) {
  return run_shell(std::string(RATCHET_EXE) + " " + args);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

void corrupt_token_chunk(const std::string& path, unsigned long long first) {
  ratchet::h5_init();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "tokens", H5P_DEFAULT);
  hsize_t offset[1] = {first};
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  const herr_t found = H5Dget_chunk_info_by_coord(d, offset, &mask, &addr, &size);
  H5Dclose(d);
  H5Fclose(f);
  if (found < 0 || size == 0) throw std::runtime_error("no stored chunk of /tokens in " + path);
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp((std::streamoff)(addr + size / 2));
  const std::string junk(std::min<hsize_t>(16, size / 2), '\xA5');
  io.write(junk.data(), (std::streamsize)junk.size());
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string shard_bible(const TempDir& dir, const std::string& passage) {
  auto r = run_shell("bible -f '" + passage + "' > " + (dir / "corpus.txt"));
  if (r.exit_code != 0) return "bible-kjv (installed by scripts/install-deps.sh) failed:\n" + r.output;
  r = run_ratchet("shard --tokenizer byte --input " + (dir / "corpus.txt") + " --output-dir " +
                  (dir / "data") + " --val-fraction 0.1 --seed 1");
  if (r.exit_code != 0) return "ratchet shard failed:\n" + r.output;
  return "";
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = std::fmax(m, std::fabs((double)a[i] - b[i]));
  return m;
}

double nmse(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - ref[i];
    num += d * d;
    den += (double)ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

nlohmann::json read_json_file(const std::string& path) {
  return nlohmann::json::parse(read_file(path));
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos)
      out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<double> jsonl_values(const std::string& path, const std::string& key) {
  std::vector<double> out;
  for (const nlohmann::json& o : read_jsonl(path))
    if (o.contains(key) && o[key].is_number()) out.push_back(o[key].get<double>());
  return out;
}

std::vector<double> printed_losses(const std::string& output) {
  std::vector<double> v;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    const auto p = line.find("| loss ");
    if (line.rfind("step", 0) == 0 && p != std::string::npos) v.push_back(std::stod(line.substr(p + 7)));
  }
  return v;
}

std::string sibling_program(const std::string& exe, const std::string& name) {
  return exe.substr(0, exe.find_last_of('/') + 1) + name;
}

}  // namespace ratchet::testing
