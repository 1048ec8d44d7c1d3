#include "iotest/common/file_layout.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"

extern char** environ;

namespace iotest {

std::string file_system_name(const std::string& mount_type) {
  std::string name = mount_type;
  if (name.starts_with("fuse.")) name = name.substr(5);
  if (name == "ceph-fuse") return "ceph";
  if (name == "nfs4") return "nfs";
  if (name == "gpfs" || name == "mmfs") return "gpfs";
  return name;
}

std::string file_system_client(const std::string& mount_type) {
  const bool fuse =
      mount_type.starts_with("fuse.") || mount_type == "fuse" || mount_type == "fuseblk";
  return fuse ? "fuse" : "kernel";
}

namespace {

constexpr const char* kExpected =
    "expected FIELD=VALUE[,...] with fields object_size, stripe_unit, stripe_count and pool "
    "(sizes in bytes or with K, M, G: object_size=4M,stripe_unit=1M,stripe_count=4)";
// Ceph's smallest stripe unit (CEPH_MIN_STRIPE_UNIT): every stripe unit
// is a multiple of it.
constexpr std::int64_t kStripeUnitStep = 64 << 10;
// No layout field is near this (RADOS objects are 128 MiB at most by
// default); it bounds the arithmetic.
constexpr std::int64_t kLargest = std::int64_t{1} << 40;

// A positive decimal integer, all of `text`.
std::optional<std::int64_t> whole_number(std::string_view text) {
  std::int64_t v = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (error != std::errc() || end != text.data() + text.size() || v <= 0 || v > kLargest)
    return std::nullopt;
  return v;
}

// "4M" -> 4194304; "65536" -> 65536 (binary suffixes, either case).
std::optional<std::int64_t> size_of(std::string_view text) {
  const auto unit =
      text.empty() ? std::string_view::npos : std::string_view("KMGkmg").find(text.back());
  const int shift = unit == std::string_view::npos ? 0 : 10 * (static_cast<int>(unit % 3) + 1);
  if (shift > 0) text.remove_suffix(1);
  const auto v = whole_number(text);
  if (!v || *v > (kLargest >> shift)) return std::nullopt;
  return *v << shift;
}

// One FIELD=VALUE of the request into `layout`.
void take_field(const std::string& field, const std::string& value, FileLayout& layout,
                const std::string& option) {
  const auto bad = [&](const std::string& what) {
    return UsageError(option, field + "=" + value + ": expected " + what);
  };
  const auto given_twice = [&](bool given) {
    if (given) throw UsageError(option, field + " given twice; " + kExpected);
  };
  if (field == "pool") {
    given_twice(!layout.pool.empty());
    if (value.empty() || value.find_first_of(" \t\n=,") != std::string::npos)
      throw bad("a pool's name or id");
    layout.pool = value;
    return;
  }
  std::int64_t* target = field == "object_size"    ? &layout.object_size
                         : field == "stripe_unit"  ? &layout.stripe_unit
                         : field == "stripe_count" ? &layout.stripe_count
                                                   : nullptr;
  if (!target) throw UsageError(option, "unknown field '" + field + "'; " + kExpected);
  given_twice(*target != 0);
  const auto v = field == "stripe_count" ? whole_number(value) : size_of(value);
  if (!v) throw bad(field == "stripe_count" ? "a count, 1 or more" : "a size (4M, 1048576)");
  *target = *v;
}

// 4194304 -> "4M", 65536 -> "64K", 1000 -> "1000".
std::string size_text(std::int64_t bytes) {
  constexpr std::pair<int, const char*> kUnits[] = {{30, "G"}, {20, "M"}, {10, "K"}};
  for (const auto& [shift, suffix] : kUnits)
    if (bytes % (std::int64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + suffix;
  return std::to_string(bytes);
}

// What Ceph would refuse (EINVAL), said at the command line instead.
void check_as_ceph_does(const FileLayout& l, const std::string& option) {
  if (l.stripe_unit > 0 && l.stripe_unit % kStripeUnitStep != 0)
    throw UsageError(option, "stripe_unit=" + size_text(l.stripe_unit) +
                                 ": expected a multiple of 64K (Ceph's smallest stripe unit)");
  if (l.stripe_unit > 0 && l.object_size > 0 && l.object_size % l.stripe_unit != 0)
    throw UsageError(option,
                     "object_size=" + size_text(l.object_size) +
                         ": expected a multiple of stripe_unit=" + size_text(l.stripe_unit));
}

}  // namespace

FileLayout parse_layout_request(const std::string& text, const std::string& option) {
  if (text.empty()) throw UsageError(option, std::string(kExpected) + ", got nothing");
  FileLayout layout;
  std::istringstream fields(text);
  std::string item;
  while (std::getline(fields, item, ',')) {
    const auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0)
      throw UsageError(option, std::string(kExpected) + ", got '" + text + "'");
    take_field(item.substr(0, equals), item.substr(equals + 1), layout, option);
  }
  if (text.back() == ',') throw UsageError(option, std::string(kExpected) + ", got '" + text + "'");
  check_as_ceph_does(layout, option);
  return layout;
}

namespace {
// The request's fields given, "KEY" `equals` VALUE, joined by `separator`.
std::string fields_text(const FileLayout& l, const char* separator, bool sizes_as_bytes) {
  std::string s;
  const auto add = [&](const char* key, const std::string& value) {
    s += (s.empty() ? "" : separator) + std::string(key) + "=" + value;
  };
  const auto size = [&](std::int64_t v) {
    return sizes_as_bytes ? std::to_string(v) : size_text(v);
  };
  if (l.object_size > 0) add("object_size", size(l.object_size));
  if (l.stripe_unit > 0) add("stripe_unit", size(l.stripe_unit));
  if (l.stripe_count > 0) add("stripe_count", std::to_string(l.stripe_count));
  if (!l.pool.empty()) add("pool", l.pool);
  return s;
}
}  // namespace

std::string layout_request_text(const FileLayout& request) {
  return fields_text(request, ",", false);
}

std::string ceph_layout_value(const FileLayout& request) {
  return fields_text(request, " ", true);
}

std::optional<FileLayout> parse_ceph_layout(const std::string& object_size,
                                            const std::string& stripe_unit,
                                            const std::string& stripe_count,
                                            const std::string& pool) {
  FileLayout l;
  const auto o = whole_number(object_size), u = whole_number(stripe_unit),
             c = whole_number(stripe_count);
  if (!o || !u || !c || pool.empty()) return std::nullopt;
  l.object_size = *o;
  l.stripe_unit = *u;
  l.stripe_count = *c;
  l.pool = pool;
  return l;
}

namespace {

// An attribute's value (Ceph's carry no NUL), or the errno of the failure.
std::optional<std::string> attribute(const std::string& path, const std::string& name, int& error) {
  std::vector<char> value(256);
  for (int tries = 0; tries < 3; ++tries) {
    const ssize_t n = ::getxattr(path.c_str(), name.c_str(), value.data(), value.size());
    if (n >= 0) {
      std::string text(value.data(), static_cast<size_t>(n));
      while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
      return text;
    }
    error = errno;
    if (error != ERANGE) return std::nullopt;
    const ssize_t needed = ::getxattr(path.c_str(), name.c_str(), nullptr, 0);
    if (needed < 0) return std::nullopt;
    value.resize(static_cast<size_t>(needed) + 1);
  }
  return std::nullopt;
}

// The four fields under `prefix` ("ceph.file.layout."); `error` the
// first failure's errno.
std::optional<FileLayout> layout_under(const std::string& path, const std::string& prefix,
                                       int& error) {
  std::string values[4];
  const char* fields[4] = {"object_size", "stripe_unit", "stripe_count", "pool"};
  for (int i = 0; i < 4; ++i) {
    const auto v = attribute(path, prefix + fields[i], error);
    if (!v) return std::nullopt;
    values[i] = *v;
  }
  return parse_ceph_layout(values[0], values[1], values[2], values[3]);
}

// The first regular file in a folder, depth first (a MeasurementSet's
// table.dat, or a file of a subtable): files inherit the layout of the
// folder they are made in.
std::optional<std::string> first_file_in(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) return it->path().string();
  return std::nullopt;
}

}  // namespace

std::optional<FileLayout> read_file_layout(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  int error = 0;
  if (!S_ISDIR(st.st_mode)) return layout_under(path, "ceph.file.layout.", error);
  if (auto own = layout_under(path, "ceph.dir.layout.", error)) return own;
  if (error != ENODATA) return std::nullopt;  // not CephFS (ENOTSUP), or unreadable
  const auto file = first_file_in(path);
  return file ? layout_under(*file, "ceph.file.layout.", error) : std::nullopt;
}

std::string set_file_layout(int fd, const std::string& path, bool folder,
                            const FileLayout& request) {
  const std::string name = folder ? "ceph.dir.layout" : "ceph.file.layout";
  const std::string value = ceph_layout_value(request);
  if (::fsetxattr(fd, name.c_str(), value.data(), value.size(), 0) == 0) return {};
  const int error = errno;
  const std::string why = std::strerror(error);
  if (error == ENOTSUP || error == EOPNOTSUPP) {
    const auto mount = mount_of(path);
    return (mount ? file_system_name(mount->type) : std::string("this file system")) + " has no " +
           name + ": " + why;
  }
  // EINVAL: a pool not added to the file system, a layout Ceph will not
  // take; EPERM: a client without Ceph's 'p' capability.
  return "CephFS refused " + name + "=\"" + value + "\": " + why;
}

std::optional<int> parse_pool_size(const std::string& json_text) {
  // The object alone: the CLI may say more around it (warnings on stderr).
  const auto open = json_text.find('{'), close = json_text.rfind('}');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  const auto j = nlohmann::json::parse(json_text.substr(open, close - open + 1), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("size") || !j["size"].is_number_integer())
    return std::nullopt;
  const auto size = j["size"].get<std::int64_t>();
  if (size < 1 || size > 1000) return std::nullopt;
  return static_cast<int>(size);
}

namespace {

// `program` as PATH finds it (an executable file), or empty.
std::string on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream folders(path ? path : "");
  std::string folder;
  while (std::getline(folders, folder, ':')) {
    const std::string candidate = (folder.empty() ? "." : folder) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// Runs `argv` (no shell), its stdout and stderr into `output`: its exit
// status, or -1 where it could not be started.
int run_captured(const std::vector<std::string>& argv, std::string& output) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned == 0) {
    char buffer[4096];
    for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
      if (n > 0)
        output.append(buffer, static_cast<size_t>(n));
      else if (errno != EINTR)
        break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  if (spawned != 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The first line of a command's output, for a one-line reason.
std::string first_line(const std::string& text) {
  const auto start = text.find_first_not_of(" \t\n");
  if (start == std::string::npos) return "no output";
  return text.substr(start, text.find('\n', start) - start);
}

}  // namespace

PoolReplication pool_replication(const std::string& pool) {
  const std::string ceph = on_path("ceph");
  if (ceph.empty()) return {std::nullopt, "ceph CLI not found"};
  // --connect-timeout: the CLI's own bound on reaching a monitor; timeout
  // also bounds what follows (and a CLI that ignores it).
  std::vector<std::string> argv{ceph,   "--connect-timeout=10", "osd", "pool", "get", pool,
                                "size", "--format=json"};
  if (const std::string bound = on_path("timeout"); !bound.empty())
    argv.insert(argv.begin(), {bound, "--kill-after=2", "10"});
  std::string output;
  const int status = run_captured(argv, output);
  if (status == 124 || status == 137) return {std::nullopt, "ceph osd pool get failed: no answer in 10 s"};
  if (status != 0)
    return {std::nullopt,
            "ceph osd pool get failed: " +
                (status < 0 ? std::string("could not start it") : first_line(output))};
  if (const auto copies = parse_pool_size(output)) return {copies, ""};
  return {std::nullopt, "ceph osd pool get failed: unexpected output '" + first_line(output) + "'"};
}

}  // namespace iotest
