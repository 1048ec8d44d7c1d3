// Exceptions must not leave an OpenMP region (they would terminate the
// program): work inside one runs through `capture`, and the first exception
// is rethrown by `rethrow` once the region is over.
#pragma once

#include <exception>
#include <mutex>
#include <utility>

namespace iotest {

class ExceptionCollector {
 public:
  template <typename F>
  void capture(F&& work) noexcept {
    try {
      work();
    } catch (...) {
      const std::lock_guard<std::mutex> hold(lock_);
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() {
    if (first_) std::rethrow_exception(std::exchange(first_, nullptr));
  }

 private:
  std::mutex lock_;
  std::exception_ptr first_;
};

}  // namespace iotest
