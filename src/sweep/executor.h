// Where trial segments run: `ratchet train` processes on this node (local),
// job steps in the controller's own allocation (srun), or one batch job per
// segment (sbatch, from slurm/sweep-trial.sbatch).
//
// Every executor leaves the same marker files next to the trial's run
// directory, so that a restarted controller can tell a segment that never
// started from one that is still running or has ended while it was away:
//   TRIAL/seg-NAME.pid   "PID START": the trainer's (or srun's) pid and start time
//                        (local, srun: the controller's own child, no shell between)
//   TRIAL/seg-NAME.job   the Slurm job id (sbatch; J_I for task I of array job J)
//   TRIAL/seg-NAME.array "LIST INDEX JOBNAME": the segment is task INDEX of the
//                        array job submitted for LIST (written before sbatch)
//   TRIAL/seg-NAME.exit  the trainer's exit code, written (renamed) when it ends: by
//                        the controller that reaps it, by the trainer itself
//                        (RATCHET_SWEEP_EXIT_FILE) or by the batch script
// The trainer's output is appended to TRIAL/train.log.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ratchet::sweep {

struct Segment {
  std::string trial_dir;           // the trial's --run-dir
  std::string name;                // "r1-a0": rung index and attempt
  std::vector<std::string> argv;   // the trainer's command line
  std::map<std::string, std::string> env;  // extra environment (CUDA_VISIBLE_DEVICES, ...)
  int threads = 1;                 // CPU threads (OMP_NUM_THREADS, srun -c)
  std::string job_name;            // Slurm job/step name
  std::string base() const { return trial_dir + "/seg-" + name; }
};

struct SegmentStatus {
  enum State { kRunning, kExited, kLost };  // kLost: gone without an exit code (killed)
  State state = kRunning;
  int exit_code = -1;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Starts the segment, or adopts it when its markers show that a previous
  // controller already started it; returns the handle (pid or job id).
  virtual std::string launch(const Segment& s) = 0;
  // Starts several segments at once (sbatch: one job array); the handles in
  // order. By default one launch() each.
  virtual std::vector<std::string> launch_batch(const std::vector<Segment>& segs) {
    std::vector<std::string> h;
    for (const auto& s : segs) h.push_back(launch(s));
    return h;
  }
  virtual SegmentStatus poll(const Segment& s, const std::string& handle) = 0;
  // Asks the segment to save and exit (the trainer's stop signal, USR1).
  virtual void stop(const Segment& s, const std::string& handle) = 0;
  virtual double poll_seconds() const { return 0.2; }
};

// kind: local | srun | sbatch. sbatch_template: the batch script for sbatch;
// sbatch_args: extra sbatch flags (split on spaces); array_max: at most this
// many segments per job array (1: one job per segment); array_dir: where the
// arrays' segment lists go (the sweep's DIR/arrays).
std::unique_ptr<Executor> make_executor(const std::string& kind, const std::string& sbatch_template,
                                        const std::string& sbatch_args, int array_max = 1,
                                        const std::string& array_dir = "");

// A job that squeue no longer lists counts as gone only once it has stayed
// unlisted for `grace_seconds`: a job Slurm is requeuing (exit 75) can drop
// out of squeue for a moment, and taking it for lost started its segment a
// second time (the slurm sweep tests caught it under load).
class MissingJobs {
 public:
  explicit MissingJobs(double grace_seconds) : grace_(grace_seconds) {}
  // True when `handle`, unlisted at time `now` (seconds), has been unlisted
  // since at least `grace` before; `listed` clears its record.
  bool gone(const std::string& handle, bool listed, double now);

 private:
  double grace_;
  std::map<std::string, double> since_;
};

// True when a live process holds RUN_DIR/ratchet.lock (a trainer writing
// there); `holder` gets the lock file's host and pid lines.
bool run_dir_locked(const std::string& run_dir, std::string* holder = nullptr);

// Shell-quotes one word ('...') unless it needs none.
std::string shell_quote(const std::string& s);
// The last `lines` lines of a file ("" if unreadable).
std::string file_tail(const std::string& path, int lines);

}  // namespace ratchet::sweep
