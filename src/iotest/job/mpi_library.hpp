// The MPI library iotest was built with decides how its jobs are launched:
// Open MPI's mpirun and MPICH's Hydra mpiexec take different flags, and
// under Slurm each MPI speaks its own process-management interface.
#pragma once

#include <mpi.h>

#include <string>

namespace iotest::job {

enum class MpiLibrary { open_mpi, mpich };

constexpr MpiLibrary built_with_mpi() {
#ifdef OPEN_MPI
  return MpiLibrary::open_mpi;
#else
  return MpiLibrary::mpich;  // MPICH and its derivatives (Cray MPICH, Intel MPI, MVAPICH)
#endif
}

// MPICH's launcher as CMake found it beside the compiler wrapper (the
// mpich preset: /usr/bin/mpiexec.mpich; a plain `mpiexec` may be another
// MPI's where several are installed).
std::string mpiexec_path();

// What starts a job of this build on one machine, as root too (CI, a
// container): Open MPI's mpirun must be told both; MPICH's mpiexec needs
// neither.
std::string local_launcher();

}  // namespace iotest::job
