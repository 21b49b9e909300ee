// The MPI communicator (host buffers) and the mpiCheck macro. Only compiled
// when CMake finds MPI (RATCHET_HAVE_MPI); include only under that macro.
#pragma once
// C API only: Open MPI's mpi.h would otherwise pull in its C++ bindings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>

#include "dist/communicator.h"

namespace ratchet {

// Prints the statement, function, file:line, rank, host and MPI's error
// string, then MPI_Abort()s the whole job.
[[noreturn]] void mpi_check_failed(int err, const char* stmt, const char* func, const char* file,
                                   int line);

// Initialises MPI (MPI_THREAD_FUNNELED) if needed; finalises it when destroyed.
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& launch);

MPI_Datatype mpi_dtype(DType t);

}  // namespace ratchet

#define mpiCheck(stmt)                                                                \
  do {                                                                                \
    int mpi_check_err_ = (stmt);                                                      \
    if (mpi_check_err_ != MPI_SUCCESS)                                                \
      ::ratchet::mpi_check_failed(mpi_check_err_, #stmt, __func__, __FILE__, __LINE__); \
  } while (0)
