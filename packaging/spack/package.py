# Spack recipe for ratchet. Copy this directory into a Spack repository as
# packages/ratchet/package.py (`spack repo create`, then `spack install ratchet`).
# Dependency names are Spack's builtin packages; the CMake options are the ones
# CMakeLists.txt declares (tests/unit/packaging/test_packaging.cpp checks both files).
from spack.package import *


class Ratchet(CMakePackage, CudaPackage):
    """A framework-free C++17/CUDA trainer for GPT-style transformers on Slurm
    clusters: FP32 CPU backend (OpenBLAS + OpenMP), CUDA backend (cuBLASLt and
    its own kernels), HDF5 token shards and checkpoints, MPI/NCCL data
    parallel, preemption-safe checkpoints and a cost ledger."""

    homepage = "https://github.com/ratchet-trainer/ratchet"  # EDIT: the project's home
    git = "https://github.com/ratchet-trainer/ratchet.git"  # EDIT: the project's repository

    version("main", branch="main")

    variant("mpi", default=True, description="Data parallel over MPI (and NCCL with +cuda)")
    variant("native", default=False,
            description="Optimise for the build machine's CPU (-march=native); off for "
                        "binaries shared by a heterogeneous cluster")
    variant("plots", default=True, description="gnuplot at run time for `ratchet report` plots")

    depends_on("cmake@3.24:", type="build")
    depends_on("boost@1.74: +program_options")
    # kernels/simt (the CUDA kernels on the CPU) runs one fiber per CUDA thread
    depends_on("boost@1.74: +context", when="+cuda")
    depends_on("hdf5@1.10: ~mpi")
    depends_on("zlib-api")
    depends_on("libdeflate")  # shard chunks (src/data/chunk_reader.h)
    depends_on("openblas threads=pthreads")
    depends_on("nlohmann-json")
    depends_on("openssl")
    depends_on("mpi", when="+mpi")
    depends_on("nccl", when="+cuda+mpi")
    depends_on("googletest", type="test")
    depends_on("gnuplot", type="run", when="+plots")

    conflicts("cuda_arch=none", when="+cuda",
              msg="give the GPU architectures, e.g. cuda_arch=80 or cuda_arch=90")
    # cuBLASLt's BF16 GEMMs and the kernels' BF16 arithmetic need sm_80 or later
    for _arch in CudaPackage.cuda_arch_values:
        if _arch.isdigit() and int(_arch) < 80:
            conflicts("cuda_arch={0}".format(_arch), when="+cuda", msg="ratchet needs sm_80+")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("RATCHET_CUDA", "ON" if spec.satisfies("+cuda") else "OFF"),
            self.define("RATCHET_MPI", "ON" if spec.satisfies("+mpi") else "OFF"),
            # kernels/ and its simt build need CUDA's headers
            self.define("RATCHET_KERNELS", spec.satisfies("+cuda")),
            self.define_from_variant("RATCHET_NATIVE", "native"),
            self.define("RATCHET_TESTS", self.run_tests),
            self.define("RATCHET_BENCH", False),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CUDA_ARCHITECTURES",
                                    ";".join(spec.variants["cuda_arch"].value)))
        return args
