#include "iotest/common/system.hpp"

#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <string>

namespace iotest {

index_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<index_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

index_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    index_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

}  // namespace iotest
