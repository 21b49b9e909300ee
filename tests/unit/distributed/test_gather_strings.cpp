// Communicator::gather_strings (src/distributed/communicator.h) on the
// single-process communicator; tests/mpi/test_mpi_collectives.cpp runs it on
// 1-4 ranks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distributed/communicator.h"

namespace ratchet {
namespace {

TEST(GatherStrings, OneRankGetsItsOwnStringBack) {
  auto comm = make_single_communicator();
  const std::string odd("a\0b", 3);  // bytes, not a C string
  EXPECT_EQ(comm->gather_strings(odd), std::vector<std::string>{odd});
  EXPECT_EQ(comm->gather_strings(""), std::vector<std::string>{""});
}

}  // namespace
}  // namespace ratchet
