// What the operating system tells about this process and machine.
#pragma once

#include <chrono>
#include <optional>
#include <string>

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

std::string host_name();
// Now, UTC, ISO 8601 to the second ("2026-11-23T07:40:00Z").
std::string utc_now();

// The file system a path lives on (/proc/self/mountinfo): the mount point
// holding it (or, for a path not yet created, its nearest existing parent),
// the type and the mount options (per-mount, then the super block's).
struct MountInfo {
  std::string mount_point, type, options;
};
std::optional<MountInfo> mount_of(const std::string& path);

}  // namespace iotest
