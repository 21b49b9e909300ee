#include "train/suspect_nodes.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json.h"

namespace ratchet {

std::string suspect_nodes_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "suspect_nodes.jsonl").string();
}

bool append_suspect(const std::string& dir, const SuspectNode& s) {
  std::vector<std::string> damaged;
  for (const SuspectNode& e : read_suspects(dir, &damaged))
    if (e.node == s.node && e.cause == s.cause && e.job_id == s.job_id && e.time == s.time)
      return false;
  OrderedJson j;
  j["node"] = s.node;
  j["rank"] = s.rank;
  j["cause"] = s.cause;
  j["job_id"] = s.job_id;
  j["time"] = s.time;
  j["detail"] = s.detail;
  const std::string line = json_line(j) + "\n";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = suspect_nodes_path(dir);
  // One write(2) with O_APPEND: a line is never torn by another writer.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) fail("cannot open ", path, " to record suspect node ", s.node, ": ", std::strerror(errno));
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int err = errno;
  ::close(fd);
  if (n != (ssize_t)line.size())
    fail("cannot write ", path, " (suspect node ", s.node, "): ", std::strerror(err));
  return true;
}

std::vector<SuspectNode> read_suspects(const std::string& dir, std::vector<std::string>* damaged) {
  std::vector<SuspectNode> out;
  const std::string path = suspect_nodes_path(dir);
  std::ifstream f(path);
  if (!f) return out;
  std::string line;
  for (int no = 1; std::getline(f, line); no++) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const OrderedJson j = OrderedJson::parse(line, nullptr, false);
    std::string why;
    if (j.is_discarded() || !j.is_object()) why = "not a JSON object";
    else if (!j.contains("node") || !j["node"].is_string() || j["node"].get<std::string>().empty())
      why = "no \"node\" name";
    if (why.empty()) {
      try {
        SuspectNode s;
        s.node = j["node"].get<std::string>();
        s.rank = j.value("rank", -1);
        s.cause = j.value("cause", "");
        s.job_id = j.value("job_id", "");
        s.time = j.value("time", (int64_t)0);
        s.detail = j.value("detail", "");
        out.push_back(std::move(s));
        continue;
      } catch (const std::exception& e) {  // a field of the wrong type
        why = std::string("a field of the wrong type (") + e.what() + ")";
      }
    }
    if (damaged) damaged->push_back(path + ":" + std::to_string(no) + ": " + why);
  }
  return out;
}

ExclusionPlan plan_exclusion(const std::vector<SuspectNode>& suspects,
                             const std::vector<std::string>& current,
                             const std::vector<std::string>& partition, int job_nodes) {
  // Each suspect node: its incidents and its latest one.
  struct Tally {
    int incidents = 0;
    int64_t latest = 0;
    size_t order = 0;  // the position of its latest line (equal times)
  };
  std::map<std::string, Tally> tally;
  for (size_t i = 0; i < suspects.size(); i++) {
    Tally& t = tally[suspects[i].node];
    t.incidents++;
    t.latest = std::max(t.latest, suspects[i].time);
    t.order = i;
  }
  std::vector<std::string> ranked;
  for (const auto& [node, t] : tally) ranked.push_back(node);
  std::sort(ranked.begin(), ranked.end(), [&](const std::string& a, const std::string& b) {
    const Tally &x = tally[a], &y = tally[b];
    if (x.incidents != y.incidents) return x.incidents > y.incidents;
    if (x.latest != y.latest) return x.latest > y.latest;
    return x.order > y.order;
  });

  // The user's own exclusions (what is excluded now that no suspect
  // explains) are kept whatever the bound says: they were a decision.
  std::set<std::string> exclude;
  for (const std::string& n : current)
    if (!n.empty() && !tally.count(n)) exclude.insert(n);
  const std::set<std::string> before(current.begin(), current.end());
  const std::set<std::string> in_partition(partition.begin(), partition.end());
  auto schedulable = [&] {
    int n = 0;
    for (const std::string& p : in_partition) n += !exclude.count(p);
    return n;
  };

  ExclusionPlan plan;
  for (const std::string& node : ranked) {
    const bool costs = in_partition.count(node) > 0;
    if (in_partition.empty() || (costs && schedulable() - 1 < job_nodes)) {
      plan.left_in.push_back(node);
      continue;
    }
    exclude.insert(node);
    if (!before.count(node)) plan.added.push_back(node);
  }
  plan.exclude.assign(exclude.begin(), exclude.end());
  if (!plan.left_in.empty()) {
    std::string nodes;
    for (const std::string& n : plan.left_in) nodes += (nodes.empty() ? "" : ", ") + n;
    if (in_partition.empty())
      plan.message = "not excluding suspect node(s) " + nodes +
                     ": the partition's nodes are unknown, so the job might no longer be "
                     "schedulable";
    else
      plan.message = "not excluding suspect node(s) " + nodes + ": the partition has " +
                     std::to_string(in_partition.size()) + " node(s), " +
                     std::to_string(in_partition.size() - schedulable()) +
                     " excluded already, and the job needs " + std::to_string(job_nodes) +
                     " (the exclusion bound is reached)";
  }
  return plan;
}

}  // namespace ratchet
