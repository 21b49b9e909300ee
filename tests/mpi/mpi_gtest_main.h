// The main() of the in-process MPI test programs (tests/mpi/test_mpi_*.cpp
// that call collectives themselves): one copy runs per rank under mpirun.
// Only rank 0 prints gtest's report (one is enough), but a failure on any
// rank fails every rank's exit code, so ctest sees it whichever rank failed.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "distributed/communicator.h"

namespace ratchet::testing {

// Runs every test with *comm set to the job's communicator for their duration.
inline int run_mpi_gtests(int argc, char** argv, Communicator** comm_out) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<Communicator> comm = make_communicator();
  *comm_out = comm.get();
  if (comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  const bool any_failed = comm->agree(rc != 0);
  if (rc != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", comm->rank());
  *comm_out = nullptr;
  return any_failed ? 1 : 0;
}

}  // namespace ratchet::testing
