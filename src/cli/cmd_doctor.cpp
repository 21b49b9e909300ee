// `ratchet doctor RUN_DIR`: what the hang watchdog's flight records say
// happened, in one line (report/flight_doctor.h, docs/resilience.md).
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "report/flight_doctor.h"

namespace po = boost::program_options;

namespace ratchet {

int cmd_doctor(int argc, char** argv) {
  std::string run_dir;
  po::options_description desc("ratchet doctor options");
  desc.add_options()
    ("help,h", "print this help")
    ("run-dir", po::value(&run_dir), "the run directory (also the first positional argument)");
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "doctor", &pos, false)) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet doctor RUN_DIR\n\nReads the hang watchdog's flight records "
                 "(RUN_DIR/flight/rank_R.json, written by\n`ratchet train --hang-timeout`) and "
                 "says in one line which rank stopped where,\ne.g. \"rank 1 (node2) never "
                 "entered all_reduce #5812 (...); rank 0 waited 63.0 s\".\nExit 0, also when "
                 "there are no records (it says so); damaged records are named\non stderr and "
                 "left out. docs/resilience.md.\n\n"
              << desc;
    return kExitOk;
  }
  po::notify(vm);
  if (run_dir.empty()) fail("give the run directory: ratchet doctor RUN_DIR");
  const FlightDoctor d = flight_doctor(run_dir);
  for (const std::string& why : d.damaged) std::cerr << "damaged flight record " << why << "\n";
  if (d.records == 0)
    std::cout << "no flight records in " << run_dir
              << "/flight (the run had no hang watchdog, --hang-timeout 0, or never started one)"
              << "\n";
  else
    std::cout << d.verdict << "\n";
  return kExitOk;
}

}  // namespace ratchet
