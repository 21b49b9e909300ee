// The CMake MPI probe (cmake/mpi_probe): an MPI installation whose compiler
// wrapper names include directories that do not exist (Debian's openmpi-bin
// without libopenmpi-dev made FindMPI fail the configure with "Imported target
// MPI::MPI_C includes non-existent path") must turn MPI off with a message
// under RATCHET_MPI=AUTO, and still fail under RATCHET_MPI=ON. A stand-in
// wrapper reproduces that installation without uninstalling anything.
#include <gtest/gtest.h>

#include <string>

#include "testing/test_util.h"

using namespace ratchet::testing;

namespace {

// mpicc stand-in: Open MPI's --showme answers, with an include directory that
// does not exist; compiling goes to gcc (which then finds no mpi.h).
const char* kFakeMpicc = R"(#!/bin/sh
case "$*" in
  *showme:compile*) echo "-I/nonexistent/openmpi/include -pthread" ;;
  *showme:link*) echo "-pthread -lmpi" ;;
  *showme:incdirs*) echo "/nonexistent/openmpi/include" ;;
  *showme:libdirs*) echo "" ;;
  *showme:libs*) echo "mpi" ;;
  *showme*) echo "gcc -I/nonexistent/openmpi/include -pthread -lmpi" ;;
  *) exec gcc "$@" ;;
esac
)";

RunResult configure(const TempDir& dir, const std::string& mpi) {
  write_file(dir / "mpicc", kFakeMpicc);
  run_shell("chmod +x " + (dir / "mpicc"));
  // Only the CPU trainer: the probe runs before everything optional.
  return run_shell("cmake -S " + std::string(RATCHET_TESTS_DIR) + "/.. -B " + (dir / "build") +
                   " -DRATCHET_CUDA=OFF -DRATCHET_KERNELS=OFF -DRATCHET_TESTS=OFF"
                   " -DRATCHET_BENCH=OFF -DRATCHET_MPI=" + mpi +
                   " -DMPI_C_COMPILER=" + (dir / "mpicc"));
}

}  // namespace

TEST(CmakeMpiProbe, MpiWithoutHeadersTurnsMpiOffWithAMessage) {
  TempDir dir;
  RunResult r = configure(dir, "AUTO");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cannot be compiled against"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libopenmpi-dev"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ratchet: CUDA=OFF MPI=OFF"), std::string::npos) << r.output;
}

TEST(CmakeMpiProbe, MpiOnStillRequiresUsableMpi) {
  TempDir dir;
  RunResult r = configure(dir, "ON");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("MPI=ON"), std::string::npos) << r.output;
}
