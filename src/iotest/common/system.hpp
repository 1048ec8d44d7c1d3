// What the operating system tells about this process and machine.
#pragma once

#include <chrono>

#include "iotest/common/array.hpp"

namespace iotest {

// Wall-clock timing of the stages.
using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds (user + system) of this process's threads so far (forked
// writers excluded).
double process_cpu_seconds();
// Peak resident set size of this process so far, in bytes.
index_t peak_rss_bytes();
// Bytes this machine can still give (MemAvailable), or -1 when unknown.
index_t available_memory_bytes();

}  // namespace iotest
