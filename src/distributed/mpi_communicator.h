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
#include <string>

#include "core/error.h"

#include "distributed/communicator.h"

namespace ratchet {

// MPI's text for an error code (mpiCheck's detail).
std::string mpi_error_text(int err);

// Initialises MPI (MPI_THREAD_FUNNELED) if needed; finalises it when destroyed.
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& launch);

MPI_Datatype mpi_dtype(DType t);

}  // namespace ratchet

// core/error.h's family: reports MPI's text, then (the communicator's fatal
// hook) MPI_Abort()s the whole job.
#define mpiCheck(stmt) RATCHET_CHECK_STATUS("mpi", stmt, MPI_SUCCESS, ::ratchet::mpi_error_text)
