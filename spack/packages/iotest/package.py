# Copyright the iotest authors.
#
# SPDX-License-Identifier: BSD-3-Clause

import re

from spack.package import *

try:
    # Spack >= 1.0 (package API v2): the build systems live in the builtin
    # package repository; Spack 0.x exports CMakePackage from spack.package.
    from spack_repo.builtin.build_systems.cmake import CMakePackage
    from spack_repo.builtin.build_systems.cuda import CudaPackage
except ImportError:
    pass


class Iotest(CMakePackage, CudaPackage):
    """iotest: an MPI benchmark for radio-astronomy imaging I/O at SKA scale.

    It walks a sky image through the distributed SwiFTly recombination
    (facets to subgrids and back), degrids visibilities for real telescope
    layouts and streams them to storage as UVH5 (HDF5), measuring every
    stage: can a cluster's network, storage and nodes keep up with the SKA
    Science Data Processor's imaging pipelines, and how does that scale?
    """

    homepage = "https://github.com/ska-telescope/iotest"
    git = "https://github.com/ska-telescope/iotest.git"

    license("BSD-3-Clause")

    version("main", branch="main")

    variant(
        "phdf5",
        default=True,
        description="Parallel HDF5 (hdf5+mpi): the shared-file 'phdf5' storage back-end "
        "and 'iotest h5'; without it the serial HDF5 library is used",
    )
    variant(
        "openmp",
        default=True,
        description="OpenMP threads within each rank; without it every rank runs one thread",
    )
    # Spack already compiles for the microarchitecture of the spec's target
    # (target=zen3, target=x86_64_v3, ...), so `generic` adds no -march flag
    # and the binary runs wherever that target runs. `native` adds
    # -march=native for the machine doing the build: only for building on
    # the compute node that will run the benchmark (a login node's native
    # binary may die with SIGILL on older compute nodes).
    variant(
        "arch",
        default="generic",
        values=("native", "x86-64-v3", "generic"),
        multi=False,
        description="Instruction set: generic (Spack's target flags only), "
        "x86-64-v3 (AVX2/FMA), native (-march=native on the build machine)",
    )

    # +cuda (from CudaPackage, with cuda_arch=90 for H100): the GPU
    # streamer, `--device=cuda` (docs/gpu.md). cuFFT comes with the toolkit.
    depends_on("cuda@12:", when="+cuda")
    conflicts("cuda_arch=none", when="+cuda", msg="name the GPUs' architecture: cuda_arch=90 (H100)")

    # C++20: <numbers>, <span>, floating-point std::from_chars.
    conflicts("%gcc@:10", msg="iotest needs C++20 (GCC 11 or newer)")
    conflicts("%clang@:13", msg="iotest needs C++20 (Clang 14 or newer)")
    conflicts("arch=x86-64-v3", when="target=aarch64:", msg="x86-64-v3 is an x86 level")
    conflicts("arch=x86-64-v3", when="target=ppc64le:", msg="x86-64-v3 is an x86 level")

    # C as well: FindHDF5 asks HDF5's C compiler wrappers where it lives.
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("cmake@3.22:", type="build")
    depends_on("pkgconfig", type="build")

    depends_on("mpi")

    # Only HDF5's C API is used (no C++, Fortran or high-level library);
    # H5Dget_chunk_info and H5Dget_num_chunks need 1.10.5. The parallel
    # build is linked against the same MPI as iotest.
    depends_on("hdf5@1.10.5:+mpi", when="+phdf5")
    depends_on("hdf5@1.10.5:~mpi", when="~phdf5")

    # FFTW 3, double precision, found through fftw3.pc or libfftw3:
    # fftw, amdfftw and cray-fftw provide both; MKL's FFTW interface does not.
    depends_on("fftw-api@3")
    depends_on("fftw precision=double", when="^[virtuals=fftw-api] fftw")
    conflicts(
        "^[virtuals=fftw-api] intel-oneapi-mkl",
        msg="MKL's FFTW wrappers have no libfftw3 or fftw3.pc: use fftw or amdfftw",
    )

    # LAPACKE, the C interface to LAPACK: one LAPACKE_dstev call for the
    # PSWF window, so speed does not matter. The build looks for lapacke.pc
    # or liblapacke, which netlib-lapack installs with +lapacke; OpenBLAS
    # keeps the LAPACKE symbols inside libopenblas, which the look-up does
    # not search. Hence the reference LAPACK.
    depends_on("netlib-lapack+lapacke")

    # The chunks' CRC-32 (zlib's values, at memory speed): libisal.pc.
    depends_on("isa-l")
    # The dirty image as FITS, with its WCS: cfitsio.pc.
    depends_on("cfitsio")
    # MeasurementSets (--storage=ms): casacore's tables, measures and ms.
    depends_on("casacore")
    depends_on("cli11@2:")
    depends_on("fmt@8:")
    depends_on("nlohmann-json@3.9:")
    # The S3 storage back-end: HTTP with AWS SigV4 signing (libcurl 7.75 has
    # CURLOPT_AWS_SIGV4) and the XML of S3's answers.
    depends_on("curl@7.75:")
    depends_on("libxml2")

    # The C++ unit tests, built and run by `spack install --test=root`
    # (IOTEST_BUILD_TESTS follows Spack's run_tests; see check()).
    depends_on("googletest", type="test")

    # `iotest scale` fits its results with share/iotest/tools/usl.py, which
    # needs Python with numpy and scipy at run time; that is left to the
    # user's environment rather than pulled into every install.

    def setup_run_environment(self, env):
        # The installed fit tool, for `iotest scale`.
        env.set("IOTEST_USL", join_path(self.prefix.share.iotest.tools, "usl.py"))

    def cmake_args(self):
        parallel_hdf5 = "ON" if self.spec.satisfies("+phdf5") else "OFF"
        args = [
            self.define_from_variant("IOTEST_ARCH", "arch"),
            self.define_from_variant("IOTEST_OPENMP", "openmp"),
            # ON or OFF, never AUTO: the variant decides, and with ON CMake
            # fails loudly if the HDF5 it finds is not the parallel one.
            self.define("IOTEST_PARALLEL_HDF5", parallel_hdf5),
            self.define("IOTEST_BUILD_TESTS", self.run_tests),
            # ON or OFF, never AUTO: a toolkit on the build machine must not
            # decide what a ~cuda spec contains.
            self.define("IOTEST_CUDA", "ON" if self.spec.satisfies("+cuda") else "OFF"),
        ]
        if self.spec.satisfies("+cuda"):
            args.append(
                self.define("CMAKE_CUDA_ARCHITECTURES", ";".join(self.spec.variants["cuda_arch"].value))
            )
        return args

    def check(self):
        """Build-time tests: the C++ unit tests. ctest's `cli` test runs the
        command-line tests from the project's Python venv (.venv), which a
        Spack stage does not have; they are left out."""
        ctest = Executable(self.spec["cmake"].prefix.bin.ctest)
        with working_dir(self.builder.build_directory):
            ctest("--output-on-failure", "--exclude-regex", "^cli$")

    # Stand-alone tests: spack test run iotest

    def test_version(self):
        """iotest --version prints its version"""
        iotest = which(self.prefix.bin.iotest, required=True)
        out = iotest("--version", output=str.split, error=str.split)
        assert re.search(r"\d+\.\d+\.\d+", out), f"no version in: {out}"

    def test_plan(self):
        """iotest plan sizes the smallest recombination set (no MPI job)"""
        iotest = which(self.prefix.bin.iotest, required=True)
        out = iotest("plan", "--rec-set=T05_", output=str.split, error=str.split)
        assert "iotest plan: T05_" in out, f"unexpected output: {out}"
