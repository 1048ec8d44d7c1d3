#include "iotest/common/system.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace iotest {

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

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

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::optional<MountInfo> mount_of(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(path.empty() ? "." : path, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) p = p.parent_path();
  p = fs::canonical(p, ec);
  if (ec) return std::nullopt;
  const std::string target = p.string();
  // mountinfo: id parent major:minor root mount-point options [tags] - type source super-options
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  std::optional<MountInfo> best;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, options, word;
    fields >> id >> parent >> device >> root >> point >> options;
    while (fields >> word && word != "-") {
    }
    std::string type, source, super;
    fields >> type >> source >> super;
    const bool holds = target == point || (target.rfind(point, 0) == 0 &&
                                           (point == "/" || target[point.size()] == '/'));
    // The longest matching mount point; a later one of equal length is
    // mounted over the earlier.
    if (holds && (!best || point.size() >= best->mount_point.size()))
      best = MountInfo{point, type, super.empty() ? options : options + "; " + super};
  }
  return best;
}

}  // namespace iotest
