// cuFFT, loaded when the first GPU plan is made rather than when iotest
// starts. libcufft is about 280 MB: linked normally, every rank of every
// run, --device=cpu (the default) included, maps it and touches 8-15 MB of
// it at start-up (its relocations), which the memory model would have to
// count and a shared file system serve to every node. Only GpuDegridder
// uses it, through these four entry points.
#pragma once

#include <cufft.h>

namespace iotest::device {

struct CufftLibrary {
  decltype(&cufftPlanMany) plan_many = nullptr;
  decltype(&cufftSetStream) set_stream = nullptr;
  decltype(&cufftExecZ2Z) exec_z2z = nullptr;
  decltype(&cufftDestroy) destroy = nullptr;
};

// Loads it once (the library the build found, by its soname through the
// loader's search path, else from the build's toolkit); throws
// std::runtime_error naming the library and dlerror()'s reason.
const CufftLibrary& cufft();

}  // namespace iotest::device
