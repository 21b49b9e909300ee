#include "train/fatal_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fatal_record_hook.h"
#include "core/json.h"

namespace ratchet {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
constexpr const char* kSignalNames[] = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"};
constexpr int kNumSignals = sizeof kSignals / sizeof kSignals[0];

// Rendered by install_fatal_record, read by the handler: no allocation there.
char g_path[4096];
char g_prefix[2048];  // the JSON up to the value of "cause"
bool g_installed = false;
volatile sig_atomic_t g_written = 0;
struct sigaction g_old[kNumSignals];

// Appends s to buf at *n (bounded): async-signal-safe.
void put(char* buf, size_t cap, size_t* n, const char* s) {
  while (*s && *n + 1 < cap) buf[(*n)++] = *s++;
  buf[*n] = 0;
}
void put_int(char* buf, size_t cap, size_t* n, long long v) {
  char digits[24];
  int k = 0;
  const bool neg = v < 0;
  unsigned long long u = neg ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do digits[k++] = (char)('0' + u % 10); while ((u /= 10) && k < 22);
  if (neg) digits[k++] = '-';
  char out[24];
  for (int i = 0; i < k; i++) out[i] = digits[k - 1 - i];
  out[k] = 0;
  put(buf, cap, n, out);
}

// Writes the record whole: a temporary file, then rename (both async-signal-safe).
void write_whole(const char* text, size_t len) {
  char tmp[sizeof g_path + 8];
  size_t n = 0;
  put(tmp, sizeof tmp, &n, g_path);
  put(tmp, sizeof tmp, &n, ".tmp");
  const int fd = ::open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const bool ok = ::write(fd, text, len) == (ssize_t)len;
  ::close(fd);
  if (ok) ::rename(tmp, g_path);
}

void on_fatal_signal(int sig) {
  int i = 0;
  while (i < kNumSignals && kSignals[i] != sig) i++;
  if (!g_written && i < kNumSignals) {
    g_written = 1;
    char buf[sizeof g_prefix + 128];
    size_t n = 0;
    put(buf, sizeof buf, &n, g_prefix);
    put(buf, sizeof buf, &n, "\"signal\", \"what\": \"");
    put(buf, sizeof buf, &n, kSignalNames[i]);
    put(buf, sizeof buf, &n, "\", \"time\": ");
    put_int(buf, sizeof buf, &n, (long long)::time(nullptr));
    put(buf, sizeof buf, &n, "}\n");
    write_whole(buf, n);
  }
  // Die of the signal as before: the replaced disposition (Open MPI's
  // backtrace handler, or the default), then the signal again.
  if (i < kNumSignals) sigaction(sig, &g_old[i], nullptr);
  else signal(sig, SIG_DFL);
  raise(sig);
}

void on_check_failed(const char* lib, const char* detail) {
  if (g_written) return;
  g_written = 1;
  OrderedJson j = OrderedJson::parse(std::string(g_prefix) + "\"library\"}", nullptr, false);
  if (j.is_discarded()) return;
  j["lib"] = lib;
  j["what"] = detail;
  j["time"] = (int64_t)::time(nullptr);
  const std::string text = j.dump() + "\n";
  write_whole(text.data(), text.size());
}

}  // namespace

std::string fatal_record_path(const std::string& flight_dir, int rank) {
  return (std::filesystem::path(flight_dir) / ("fatal_rank_" + std::to_string(rank) + ".json"))
      .string();
}

void install_fatal_record(const std::string& dir, int rank, const std::string& host,
                          const std::string& job_id) {
  if (dir.empty() || g_installed) return;
  const std::string path = fatal_record_path(dir, rank);
  if (path.size() + 8 >= sizeof g_path) return;  // too long a path: no record
  std::string prefix = "{\"rank\": " + std::to_string(rank) + ", \"host\": " +
                       OrderedJson(host).dump() + ", \"job_id\": " + OrderedJson(job_id).dump() +
                       ", \"pid\": " + std::to_string((long)getpid()) + ", \"cause\": ";
  if (prefix.size() >= sizeof g_prefix) return;
  std::memcpy(g_path, path.c_str(), path.size() + 1);
  std::memcpy(g_prefix, prefix.c_str(), prefix.size() + 1);
  // An older attempt's record is not this one's: the wrapper also reads only
  // records written after the step started, but a stale file would mislead
  // `ratchet doctor` too.
  std::error_code ec;
  std::filesystem::remove(path, ec);
  g_written = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  for (int i = 0; i < kNumSignals; i++) sigaction(kSignals[i], &sa, &g_old[i]);
  set_fatal_record_hook(on_check_failed);
  g_installed = true;
}

void uninstall_fatal_record() {
  if (!g_installed) return;
  set_fatal_record_hook(nullptr);
  for (int i = 0; i < kNumSignals; i++) sigaction(kSignals[i], &g_old[i], nullptr);
  g_installed = false;
}

std::vector<FatalRecord> read_fatal_records(const std::string& dir,
                                            std::vector<std::string>* damaged) {
  namespace fs = std::filesystem;
  std::vector<FatalRecord> out;
  fs::path d = dir;
  std::error_code ec;
  if (fs::is_directory(d / "flight", ec)) d /= "flight";
  if (!fs::is_directory(d, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(d, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("fatal_rank_", 0) != 0 || e.path().extension() != ".json") continue;
    std::ifstream f(e.path());
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const OrderedJson j = OrderedJson::parse(text, nullptr, false);
    std::string why;
    if (j.is_discarded() || !j.is_object()) why = "not a JSON object";
    else if (!j.contains("rank") || !j["rank"].is_number_integer()) why = "no \"rank\"";
    if (why.empty()) {
      try {
        FatalRecord r;
        r.rank = j["rank"].get<int>();
        r.host = j.value("host", "");
        r.job_id = j.value("job_id", "");
        r.cause = j.value("cause", "");
        r.lib = j.value("lib", "");
        r.what = j.value("what", "");
        r.time = j.value("time", (int64_t)0);
        out.push_back(std::move(r));
        continue;
      } catch (const std::exception& ex) {
        why = std::string("a field of the wrong type (") + ex.what() + ")";
      }
    }
    if (damaged) damaged->push_back(e.path().string() + ": " + why);
  }
  return out;
}

}  // namespace ratchet
