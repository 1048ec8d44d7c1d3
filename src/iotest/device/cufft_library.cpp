#include "iotest/device/cufft_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace iotest::device {
namespace {

template <class F>
void bind(void* library, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(library, name));
  if (!f) throw std::runtime_error(fmt::format("cuFFT: no {} in {}", name, IOTEST_CUFFT_SONAME));
}

CufftLibrary load() {
  // The soname first (LD_LIBRARY_PATH, the container's /opt/iotest/lib, the
  // system's), then the build's own toolkit.
  void* library = dlopen(IOTEST_CUFFT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!library) library = dlopen(IOTEST_CUFFT_DIR "/" IOTEST_CUFFT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw std::runtime_error(fmt::format("cuFFT: cannot load {} (nor from {}): {}",
                                         IOTEST_CUFFT_SONAME, IOTEST_CUFFT_DIR, dlerror()));
  CufftLibrary c;
  bind(library, "cufftPlanMany", c.plan_many);
  bind(library, "cufftSetStream", c.set_stream);
  bind(library, "cufftExecZ2Z", c.exec_z2z);
  bind(library, "cufftDestroy", c.destroy);
  return c;  // never closed: plans live until the process ends
}

}  // namespace

const CufftLibrary& cufft() {
  static std::once_flag once;
  static CufftLibrary library;
  std::call_once(once, [] { library = load(); });
  return library;
}

}  // namespace iotest::device
