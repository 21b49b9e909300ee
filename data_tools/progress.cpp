#include "data_tools/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace ratchet {

namespace {
// x in steps of 1000 with the unit of its size: "950 B", "1.5 MB"; whole
// numbers below the first step, one decimal above.
std::string in_thousands(double x, const char* const (&units)[5], const char* sep) {
  int u = 0;
  while (x >= 1000 && u < 4) x /= 1000, u++;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s%s" : "%.1f%s%s", x, sep, units[u]);
  return buf;
}
}  // namespace

std::string human_bytes(double b) { return in_thousands(b, {"B", "KB", "MB", "GB", "TB"}, " "); }

std::string human_count(double n) { return in_thousands(n, {"", "k", "M", "G", "T"}, ""); }

std::string human_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

bool ProgressBar::stderr_is_tty() { return ::isatty(2) == 1; }

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_(total_bytes), enabled_(enabled),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && !finished_) std::fputc('\n', stderr);
}

double ProgressBar::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::line() const {
  const double t = std::max(elapsed(), 1e-9);
  const double frac = total_ ? std::min(1.0, (double)bytes_ / (double)total_) : 1.0;
  const int width = 20, filled = (int)std::lround(frac * width);
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  const double rate = bytes_ / t;
  const double eta = rate > 0 ? (double)(total_ - std::min(total_, bytes_)) / rate : NAN;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s [%s] %3.0f%%  %s/%s  %s docs/s  %s tok/s  %s/s  ETA %s",
                label_.c_str(), bar.c_str(), frac * 100, human_bytes((double)bytes_).c_str(),
                human_bytes((double)total_).c_str(), human_count(docs_ / t).c_str(),
                human_count(tokens_ / t).c_str(), human_bytes(rate).c_str(),
                human_duration(eta).c_str());
  return buf;
}

void ProgressBar::add(uint64_t docs, uint64_t tokens, uint64_t bytes) {
  docs_ += docs;
  tokens_ += tokens;
  bytes_ += bytes;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  std::fprintf(stderr, "\r%s\x1b[K", line().c_str());
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  std::fprintf(stderr, "\r%s\x1b[K\n", line().c_str());
  std::fflush(stderr);
}

}  // namespace ratchet
