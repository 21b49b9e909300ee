// Suspect nodes (docs/resilience.md, "Excluding the bad node"): the nodes a
// run found at fault, one JSON object a line in RUN_DIR/suspect_nodes.jsonl
// (RUN_DIR: --run-dir, else --ckpt-dir), kept across requeues:
//   {"node": "rnode2", "rank": 1, "cause": "hang"|"straggler", "job_id": "42",
//    "time": 1764420000, "detail": "..."}
// Written by rank 0 of `ratchet train` (a straggler) and by `ratchet doctor
// --exclude` (the culprit of a hang, from the flight records). The Slurm
// wrapper (slurm/requeue-lib.sh) asks `ratchet doctor --exclude` which nodes
// to exclude before it requeues: plan_exclusion below, which never excludes
// so many that the job no longer fits in its partition.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet {

struct SuspectNode {
  std::string node;
  int rank = -1;
  std::string cause;   // "hang", "straggler"
  std::string job_id;  // $SLURM_JOB_ID ("" outside Slurm)
  int64_t time = 0;    // Unix seconds of the event (a hang: the detecting rank's record)
  std::string detail;  // one line: what was seen
};

std::string suspect_nodes_path(const std::string& dir);
// Appends one line (with one write(2)); an entry equal to one already there
// in node, cause, job_id and time is not added again (the wrapper may read
// the same flight records twice). Returns whether it was added; an Error
// when the file cannot be written.
bool append_suspect(const std::string& dir, const SuspectNode& s);
// The entries, oldest first; none when the file does not exist. A damaged
// line is named in *damaged ("FILE:LINE: why") and left out.
std::vector<SuspectNode> read_suspects(const std::string& dir, std::vector<std::string>* damaged);

struct ExclusionPlan {
  std::vector<std::string> exclude;  // the job's new ExcNodeList, sorted
  std::vector<std::string> added;    // suspects newly excluded by this plan
  std::vector<std::string> left_in;  // suspects not excluded: the bound was reached
  std::string message;               // "" or one line saying why some are left in
};

// Which nodes to exclude. `current`: the job's ExcNodeList now (the user's
// own exclusions plus the suspects excluded by earlier requeues; the user's
// are always kept). `partition`: the nodes of the job's partition(s);
// `job_nodes`: how many the job needs. The bound: the partition's nodes not
// excluded must stay >= job_nodes. Suspects are taken most incidents first,
// then the most recent; a suspect outside the partition is excluded at no
// cost to the bound. An empty `partition` (unknown) adds no suspect.
ExclusionPlan plan_exclusion(const std::vector<SuspectNode>& suspects,
                             const std::vector<std::string>& current,
                             const std::vector<std::string>& partition, int job_nodes);

}  // namespace ratchet
