#include "report/dead_rank.h"

#include <algorithm>
#include <regex>
#include <sstream>

namespace ratchet {

namespace {

// A device library's failure stays on its node; MPI and NCCL errors are what
// the survivors of a dead peer see, and an assertion is a bug.
bool blames_node(const FatalRecord& r) {
  if (r.cause == "signal") return true;
  return r.cause == "library" && (r.lib == "cuda" || r.lib == "cublas" || r.lib == "cudnn");
}

// srun's words for a task ended by a signal (strsignal, and Slurm's own for
// an OOM kill), against "Exited with exit code N".
bool is_signal_death(const std::string& what, std::string* sig) {
  static const std::pair<const char*, const char*> kDeaths[] = {
      {"Killed", "SIGKILL"},           {"Segmentation fault", "SIGSEGV"},
      {"Bus error", "SIGBUS"},         {"Aborted", "SIGABRT"},
      {"Illegal instruction", "SIGILL"}, {"Floating point exception", "SIGFPE"},
      {"Out Of Memory", "an OOM kill"}};
  for (const auto& [words, name] : kDeaths)
    if (what.rfind(words, 0) == 0) {
      *sig = name;
      return true;
    }
  return false;
}

}  // namespace

DeadRank find_dead_rank(const std::vector<FatalRecord>& records, int64_t since,
                        const std::string& srun_log) {
  DeadRank d;
  // The fatal records first: the rank said itself what killed it.
  std::vector<FatalRecord> mine;
  for (const FatalRecord& r : records)
    if (r.time >= since) mine.push_back(r);
  std::sort(mine.begin(), mine.end(), [](const FatalRecord& a, const FatalRecord& b) {
    return a.time != b.time ? a.time < b.time : a.rank < b.rank;
  });
  for (const FatalRecord& r : mine) {
    if (!blames_node(r) || r.host.empty()) continue;
    d.found = true;
    d.rank = r.rank;
    d.host = r.host;
    d.time = r.time;
    d.detail = "rank " + std::to_string(r.rank) + " (" + r.host + ") died of " +
               (r.cause == "signal" ? r.what : "a " + r.lib + " error: " + r.what) +
               " (its fatal record)";
    return d;
  }
  // srun's messages: the first task it reports dead of a signal, among
  // those it reports before it ends the step itself (after "Terminating
  // StepId", "Job step aborted" or "Force Terminated" the tasks die of its
  // kill: "Terminated", or "Killed" once KillWait is over).
  static const std::regex kTask(R"(srun: error: ([^ :]+): tasks? ([0-9]+)[-0-9,]*: (.+))");
  std::istringstream in(srun_log);
  std::string line, first_error;
  std::smatch m;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find("Terminating StepId") != std::string::npos ||
        line.find("Job step aborted") != std::string::npos ||
        line.find("Force Terminated") != std::string::npos)
      break;
    if (!std::regex_search(line, m, kTask)) continue;
    std::string sig;
    const std::string what = m[3].str();
    if (!is_signal_death(what, &sig)) {
      if (first_error.empty()) first_error = m[0].str();
      continue;
    }
    d.found = true;
    d.rank = std::stoi(m[2].str());
    d.host = m[1].str();
    d.detail = "rank " + m[2].str() + " (" + d.host + ") died of " + sig + " (srun: \"" +
               m[0].str() + "\")";
    return d;
  }
  if (!first_error.empty())
    d.why_not = "srun reports a task that ended with an error, none killed by a signal (\"" +
                first_error + "\")";
  // Nothing blamed: say what was seen.
  if (d.why_not.empty()) {
    for (const FatalRecord& r : mine) {
      d.why_not = "rank " + std::to_string(r.rank) + "'s fatal record says " +
                  (r.cause == "library" ? "a " + r.lib + " error" : r.cause) +
                  ", which does not blame its node";
      break;
    }
  }
  if (d.why_not.empty()) d.why_not = "no fatal record and no task death in srun's messages";
  return d;
}

}  // namespace ratchet
