// OpenMP where the build has it (IOTEST_OPENMP, the default). Without it
// every rank runs one thread: the pragmas are ignored and these stand in
// for the runtime's queries, so the code has one form.
#pragma once

#include <string>

#include "iotest/common/errors.hpp"

#ifdef _OPENMP
#include <omp.h>
#else
inline int omp_get_thread_num() {
  return 0;
}
inline int omp_get_max_threads() {
  return 1;
}
#endif

namespace iotest {

#ifdef _OPENMP
inline constexpr bool kHaveOpenMP = true;
#else
inline constexpr bool kHaveOpenMP = false;
#endif

// A thread count the build can run: any without OpenMP is 1.
inline int threads_available(int wanted) {
  return kHaveOpenMP ? wanted : 1;
}

inline void check_threads(const std::string& option, int threads) {
  if (!kHaveOpenMP && threads > 1)
    throw UsageError(option, "expected 1: this build has no OpenMP (IOTEST_OPENMP=OFF), got " +
                                 std::to_string(threads));
}

// The threads of a command in one process: as many as given, else all
// the runtime offers.
inline int threads_or_all(const std::string& option, int threads) {
  check_threads(option, threads);
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace iotest
