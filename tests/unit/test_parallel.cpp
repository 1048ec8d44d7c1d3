// Exceptions thrown inside OpenMP work reach the caller after the region.
#include <gtest/gtest.h>

#include <stdexcept>

#include "iotest/common/parallel.hpp"

namespace iotest {
namespace {

TEST(ExceptionCollector, RethrowsTheFirstFailureAfterTheRegion) {
  ExceptionCollector failures;
  int done = 0;
#pragma omp parallel for reduction(+ : done)
  for (int i = 0; i < 64; ++i)
    failures.capture([&] {
      if (i % 16 == 5) throw std::runtime_error("task failed");
      ++done;
    });
  EXPECT_EQ(done, 60);
  EXPECT_THROW(failures.rethrow(), std::runtime_error);
  EXPECT_NO_THROW(failures.rethrow());  // reported once
}

}  // namespace
}  // namespace iotest
