#include "train/time_limit.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace ratchet {

double parse_slurm_duration(const std::string& in) {
  std::string s = in;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  // Strict: an optional "D-" (digits), then 1 to 3 colon-separated groups of
  // digits. Before, "-1" read as "0-1" (one hour) and "1-2-3" as 1 day 2
  // hours: a budget the user never gave.
  double days = 0;
  const auto dash = s.find('-');
  if (dash != std::string::npos) {
    const std::string d = s.substr(0, dash);
    if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos) return -1;
    days = std::atof(d.c_str());
    s = s.substr(dash + 1);
  }
  std::vector<double> parts;
  size_t at = 0;
  while (true) {
    const size_t colon = s.find(':', at);
    const std::string p = s.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos) return -1;
    parts.push_back(std::atof(p.c_str()));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  if (parts.size() > 3) return -1;
  double secs = 0;
  if (dash != std::string::npos) {  // D-HH, D-HH:MM, D-HH:MM:SS
    const double mult[3] = {3600, 60, 1};
    for (size_t i = 0; i < parts.size(); i++) secs += parts[i] * mult[i];
  } else if (parts.size() == 1) {
    secs = parts[0];
  } else if (parts.size() == 2) {  // MM:SS
    secs = parts[0] * 60 + parts[1];
  } else {
    secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
  }
  return days * 86400 + secs;
}

TimeLimit::TimeLimit(const std::string& flag, double margin_seconds) : margin_(margin_seconds) {
  if (flag == "none") return;
  if (!flag.empty()) {
    const double s = parse_slurm_duration(flag);
    if (s <= 0)
      fail("--time-limit '", flag, "' is not a duration: give seconds, HH:MM:SS or D-HH:MM:SS, "
           "or 'none'");
    deadline_ = now_s() + s;
    source_ = "--time-limit " + flag;
    return;
  }
  const char* job = std::getenv("SLURM_JOB_ID");
  if (!job || !*job) return;
  // squeue prints the time left: "MM:SS", "HH:MM:SS", "D-HH:MM:SS", or
  // UNLIMITED / NOT_SET.
  std::string cmd = std::string("squeue -h -j ") + job + " -o %L 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return;
  char buf[128] = "";
  if (!std::fgets(buf, sizeof buf, p)) buf[0] = '\0';
  pclose(p);
  const double left = parse_slurm_duration(buf);
  if (left > 0) {
    deadline_ = now_s() + left;
    source_ = std::string("Slurm job ") + job + " time left " + buf;
    while (!source_.empty() && source_.back() == '\n') source_.pop_back();
  }
}

double TimeLimit::seconds_left() const { return deadline_ > 0 ? deadline_ - now_s() : 1e300; }

bool TimeLimit::should_stop(double step_seconds, double save_seconds) const {
  if (!active()) return false;
  // One more step, then a save, then the margin (process exit, slow disks).
  return seconds_left() < step_seconds + save_seconds + margin_;
}

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
  return buf;
}

}  // namespace ratchet
