// `ratchet plan --goodput-from RUN_DIR`: the cost at the goodput a run
// measured (its ledger's breakdown, train/ledger.h) instead of the model's.
#include <filesystem>

#include "core/error.h"
#include "plan/plan.h"
#include "train/ledger.h"

namespace ratchet::plan {

MeasuredGoodput read_measured_goodput(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "ledger.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail("--goodput-from ", run_dir, ": no ", path,
         " (give the --run-dir of a run that ran, or its --ckpt-dir when it had no --run-dir)");
  const std::optional<Ledger> l = Ledger::read_json(path);
  if (!l) fail("--goodput-from ", run_dir, ": ", path, " is not a ratchet ledger (not a JSON object of numbers)");
  const Breakdown b = l->breakdown();
  const double productive = b.part[(int)Cause::Productive];
  const double allocated = b.whole - b.part[(int)Cause::RequeueGap];
  if (!(productive > 0) || !(allocated > 0))
    fail("--goodput-from ", run_dir, ": ", path,
         " has no productive step time yet (the run has not finished a step): nothing to measure");
  MeasuredGoodput g;
  g.run_dir = run_dir;
  g.goodput = productive / b.whole;
  g.billed = productive / allocated;
  g.device_hours = b.whole / 3600;
  g.estimated = b.estimated;
  return g;
}

CostEstimate measured_cost(double work_hours, int world, double price, const MeasuredGoodput& g) {
  CostEstimate c;
  c.wall_factor = 1.0 / g.goodput;
  c.wall_hours = work_hours * c.wall_factor;
  c.device_hours = work_hours * world / g.billed;
  c.cost = c.device_hours * price;
  return c;
}

}  // namespace ratchet::plan
