// `ratchet doctor RUN_DIR`: what the hang watchdog's flight records say
// happened, in one line (report/flight_doctor.h, docs/resilience.md), and
// the suspect nodes of the run (train/suspect_nodes.h). With --exclude, the
// Slurm wrapper's question before a requeue: which nodes to exclude.
#include <boost/program_options.hpp>
#include <ctime>
#include <fstream>
#include <iterator>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "report/dead_rank.h"
#include "report/flight_doctor.h"
#include "train/suspect_nodes.h"

namespace po = boost::program_options;

namespace ratchet {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// "rnode2 (hang x1, straggler x2)" for each suspect node, in first-seen order.
std::string suspects_summary(const std::vector<SuspectNode>& suspects) {
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, int>> causes;
  for (const SuspectNode& s : suspects) {
    if (!causes.count(s.node)) order.push_back(s.node);
    causes[s.node][s.cause.empty() ? "?" : s.cause]++;
  }
  std::string out;
  for (const std::string& n : order) {
    std::string c;
    for (const auto& [cause, k] : causes[n]) c += (c.empty() ? "" : ", ") + cause + " x" + std::to_string(k);
    out += (out.empty() ? "" : "; ") + n + " (" + c + ")";
  }
  return out;
}

// A job whose ranks died this many times already (each a requeue without
// the node) fails the next time: a crash that follows the run from node to
// node is the program's or the data's, not a node's.
constexpr int kMaxDeadRankRequeues = 2;

// --dead-rank: exit 0 and the suspect recorded when a rank died; 3 when none
// is to blame. Messages on stderr (the wrapper's log).
int doctor_dead_rank(const std::string& run_dir, const std::string& step_log, int64_t since,
                     std::string job_id) {
  if (job_id.empty())
    if (const char* j = std::getenv("SLURM_JOB_ID")) job_id = j;
  std::string text;
  if (!step_log.empty()) {
    std::ifstream f(step_log);
    if (!f) fail("--dead-rank ", step_log, ": cannot read it (srun's messages of the step)");
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::vector<std::string> damaged;
  const std::vector<FatalRecord> records = read_fatal_records(run_dir, &damaged);
  for (const std::string& why : damaged) std::cerr << "damaged fatal record " << why << "\n";
  const DeadRank d = find_dead_rank(records, since, text);
  if (!d.found) {
    std::cerr << "ratchet doctor: no dead rank to blame: " << d.why_not << "\n";
    return 3;
  }
  std::cerr << "ratchet doctor: " << d.detail << "\n";
  std::vector<SuspectNode> before = read_suspects(run_dir, &damaged);
  int deaths = 0;
  for (const SuspectNode& s : before) deaths += s.cause == "dead" && s.job_id == job_id;
  if (!job_id.empty() && deaths >= kMaxDeadRankRequeues) {
    std::cerr << "ratchet doctor: job " << job_id << " lost a rank " << deaths
              << " times before this: a crash that follows the run from node to node is not "
                 "a node's fault; not requeueing\n";
    return 3;
  }
  SuspectNode s;
  s.node = d.host;
  s.rank = d.rank;
  s.cause = "dead";
  s.job_id = job_id;
  s.time = d.time > 0 ? d.time : (int64_t)std::time(nullptr);
  s.detail = d.detail;
  if (append_suspect(run_dir, s))
    std::cerr << "ratchet doctor: recorded suspect node " << s.node << " (rank " << s.rank
              << ", dead) in " << suspect_nodes_path(run_dir) << "\n";
  return 0;
}

}  // namespace

int cmd_doctor(int argc, char** argv) {
  std::string run_dir, job_id, partition_nodes, excluded, step_log;
  int job_nodes = 0;
  int64_t since = 0;
  po::options_description desc("ratchet doctor options");
  desc.add_options()
    ("help,h", "print this help")
    ("run-dir", po::value(&run_dir), "the run directory (also the first positional argument)")
    ("exclude", "record the culprits of a hang in RUN_DIR/suspect_nodes.jsonl and print the "
     "nodes the requeued job should exclude, comma-separated, on one line (the Slurm wrapper's "
     "question; messages on stderr)")
    ("job-id", po::value(&job_id), "with --exclude: the job's id for the record (default $SLURM_JOB_ID)")
    ("job-nodes", po::value(&job_nodes), "with --exclude: the nodes the job needs")
    ("partition-nodes", po::value(&partition_nodes),
     "with --exclude: the nodes of the job's partition, comma-separated (expanded: "
     "`scontrol show hostnames`); none: no suspect is excluded")
    ("excluded", po::value(&excluded),
     "with --exclude: the job's ExcNodeList now, comma-separated (expanded); the user's own "
     "exclusions are kept")
    ("dead-rank", po::value(&step_log),
     "the Slurm wrapper's question after a failed job step: FILE holds srun's messages of the "
     "step; with this attempt's fatal records (RUN_DIR/flight/fatal_rank_R.json) it names the "
     "rank that died of a signal or a device error, records its node in "
     "RUN_DIR/suspect_nodes.jsonl (cause \"dead\") and exits 0 (requeue); exit 3 when no rank "
     "is to blame (a failure: not requeued)")
    ("since", po::value(&since),
     "with --dead-rank: when the step started (Unix seconds); older fatal records are another "
     "attempt's");
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "doctor", &pos, false)) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet doctor RUN_DIR\n"
                 "       ratchet doctor RUN_DIR --exclude --job-nodes N --partition-nodes LIST "
                 "[--excluded LIST]\n"
                 "       ratchet doctor RUN_DIR --dead-rank SRUN_MESSAGES --since UNIX_SECONDS\n\nReads the hang watchdog's flight records "
                 "(RUN_DIR/flight/rank_R.json, written by\n`ratchet train --hang-timeout`) and "
                 "says in one line which rank stopped where,\ne.g. \"rank 1 (node2) never "
                 "entered all_reduce #5812 (...); rank 0 waited 63.0 s\",\nthen the run's "
                 "suspect nodes (RUN_DIR/suspect_nodes.jsonl).\nExit 0, also when "
                 "there are no records (it says so); damaged records are named\non stderr and "
                 "left out. docs/resilience.md.\n\n"
              << desc;
    return kExitOk;
  }
  po::notify(vm);
  if (run_dir.empty()) fail("give the run directory: ratchet doctor RUN_DIR");
  const bool exclude = vm.count("exclude") > 0;
  if (vm.count("dead-rank")) {
    if (exclude) fail("--dead-rank and --exclude are separate questions: ask one at a time");
    return doctor_dead_rank(run_dir, step_log, since, job_id);
  }
  if (vm.count("since")) fail("--since goes with --dead-rank");
  if (!exclude && (vm.count("job-id") || vm.count("job-nodes") || vm.count("partition-nodes") ||
                   vm.count("excluded")))
    fail("--job-id, --job-nodes, --partition-nodes and --excluded go with --exclude");
  if (exclude && job_nodes < 1)
    fail("--exclude needs --job-nodes N (N >= 1: the nodes the job needs; got ", job_nodes, ")");
  const FlightDoctor d = flight_doctor(run_dir);
  for (const std::string& why : d.damaged) std::cerr << "damaged flight record " << why << "\n";
  std::vector<std::string> damaged;
  if (!exclude) {
    if (d.records == 0)
      std::cout << "no flight records in " << run_dir
                << "/flight (the run had no hang watchdog, --hang-timeout 0, or never started one)"
                << "\n";
    else
      std::cout << d.verdict << "\n";
    // A rank's last word, when it died of a signal or a failed library call.
    for (const FatalRecord& r : read_fatal_records(run_dir, &damaged))
      std::cout << "fatal record: rank " << r.rank << " (" << r.host << ") "
                << (r.cause == "library" ? r.lib + " error: " + r.what : r.what) << " at "
                << r.time << " (Unix seconds)\n";
    for (const std::string& why : damaged) std::cerr << "damaged fatal record " << why << "\n";
    damaged.clear();
    const std::vector<SuspectNode> suspects = read_suspects(run_dir, &damaged);
    for (const std::string& why : damaged) std::cerr << "damaged suspect line " << why << "\n";
    if (!suspects.empty()) std::cout << "suspect nodes: " << suspects_summary(suspects) << "\n";
    return kExitOk;
  }

  // --exclude: the wrapper's log gets every line on stderr; stdout is the list.
  if (job_id.empty())
    if (const char* j = std::getenv("SLURM_JOB_ID")) job_id = j;
  // The verdict goes to the wrapper's log whenever a record reports a hang,
  // also when it blames no rank (a network fault: nothing to exclude).
  if (d.records > 0 && d.verdict.rfind("no hang", 0) != 0) std::cerr << "ratchet doctor: " << d.verdict << "\n";
  for (const FlightCulprit& c : d.culprits) {
    if (c.host.empty()) continue;  // a record without a host: nothing to exclude
    SuspectNode s;
    s.node = c.host;
    s.rank = c.rank;
    s.cause = "hang";
    s.job_id = job_id;
    s.time = c.time;
    s.detail = d.verdict;
    if (append_suspect(run_dir, s))
      std::cerr << "ratchet doctor: recorded suspect node " << s.node << " (rank " << s.rank
                << ", hang) in " << suspect_nodes_path(run_dir) << "\n";
  }
  const std::vector<SuspectNode> suspects = read_suspects(run_dir, &damaged);
  for (const std::string& why : damaged) std::cerr << "damaged suspect line " << why << "\n";
  const ExclusionPlan plan =
      plan_exclusion(suspects, split_list(excluded), split_list(partition_nodes), job_nodes);
  if (!plan.added.empty())
    std::cerr << "ratchet doctor: excluding suspect node(s) " << join(plan.added) << " ("
              << suspects_summary(suspects) << ")\n";
  if (!plan.message.empty()) std::cerr << "ratchet doctor: " << plan.message << "\n";
  std::cout << join(plan.exclude) << "\n";
  return kExitOk;
}

}  // namespace ratchet
