# The NCCL communicator (distributed/nccl_communicator.*) as its own library,
# ratchet_nccl, built only with the CUDA toolkit, NCCL and MPI (NCCL is
# bootstrapped over MPI). It is kept out of ratchet_lib so that only what
# needs it links libnccl: the `ratchet` executable with the real cuda backend
# (top-level CMakeLists.txt; main() registers it as the device communicator,
# distributed/communicator.h) and the NCCL tests. nccl_communicator.cpp is also
# globbed into ratchet_lib, where its RATCHET_HAVE_NCCL guard leaves it empty.
# NCCL has no CMake package: find_path/find_library with the toolkit's hints,
# wrapped in an IMPORTED target (see docs/platform.md, "CUDA toolkit without a GPU").
if(TARGET ratchet_nccl OR NOT RATCHET_HAVE_CUDA OR NOT RATCHET_HAVE_MPI)
  return()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
find_library(NCCL_LIBRARY nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(STATUS "ratchet: NCCL not found: no NCCL communicator")
  return()
endif()
if(NOT TARGET ratchet::nccl)
  add_library(ratchet::nccl UNKNOWN IMPORTED)
  set_target_properties(ratchet::nccl PROPERTIES
    IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
add_library(ratchet_nccl STATIC ${CMAKE_SOURCE_DIR}/src/distributed/nccl_communicator.cpp)
target_compile_definitions(ratchet_nccl PUBLIC RATCHET_HAVE_NCCL=1)
target_link_libraries(ratchet_nccl PUBLIC ratchet_lib ratchet::nccl CUDA::cudart)
message(STATUS "ratchet: NCCL communicator: ${NCCL_LIBRARY}")
