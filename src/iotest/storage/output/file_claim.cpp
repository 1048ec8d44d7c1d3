#include "iotest/storage/output/file_claim.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "iotest/common/errors.hpp"

namespace iotest::storage {
namespace {

// A claim's lock is on a file of its own beside the in-progress output
// (PATH.run-<nonce>.lock.partial, never written), so that another run
// looking for a live writer opens that file and never the output. It ends
// in .partial, as everything a run that died leaves does. On a parallel
// file system a second client's open of a file being written costs the
// writer: on CephFS it takes the writer's buffering caps away (the file
// goes to "mix"), and ceph-fuse 16.2 kept wanting the file's caps after
// its close, so the writer's writes stopped until the metadata server
// looked at the file again (72 s, and over 120 s in CI; bench/README.md,
// "A second job's look at a claim on CephFS").
std::string lock_path_of(const std::string& path, std::uint32_t nonce) {
  return path + ".run-" + std::to_string(nonce) + ".lock.partial";
}

// The lock file's bytes: the claim's, held from the claim on, and the
// one that says its run goes ahead (go_ahead()).
constexpr off_t kClaimByte = 0;
constexpr off_t kGoingByte = 1;

struct flock claim_lock(short type, off_t byte) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = byte;
  l.l_len = 1;
  return l;
}

std::string failed(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

FileIdentity identity_of(const struct stat& st) {  // (FileIdentity)
  return {st.st_dev, st.st_ino, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
}
bool is_file(const std::string& name, const FileIdentity& id) {
  struct stat st {};
  return ::lstat(name.c_str(), &st) == 0 && identity_of(st) == id;
}
bool is_inode(const std::string& name, dev_t dev, ino_t ino) {
  struct stat st {};
  return ::lstat(name.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

// Whether a byte of an open lock file is held by another open file.
bool is_locked(int fd, off_t byte) {
  struct flock l = claim_lock(F_WRLCK, byte);
  return ::fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

// Another run's claim on the same final name, held by it now: its nonce,
// and whether it goes ahead.
struct LiveClaim {
  std::uint32_t nonce = 0;
  bool going = false;
};

// Whether a live process holds the claim on an in-progress output (none
// where the file system keeps no locks, then only publishing finds a
// clash; and where the claim has no lock file: a run that died).
std::optional<LiveClaim> live_claim(const std::string& path, std::uint32_t nonce) {
  const int fd = ::open(lock_path_of(path, nonce).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::optional<LiveClaim> live;
  if (is_locked(fd, kClaimByte)) live = LiveClaim{nonce, is_locked(fd, kGoingByte)};
  ::close(fd);
  return live;
}

std::vector<LiveClaim> live_claims_of(const std::string& path, std::uint32_t nonce) {
  namespace fs = std::filesystem;
  const std::string prefix = fs::path(path).filename().string() + ".run-";
  const std::string suffix = ".partial";
  std::vector<LiveClaim> live;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder_of(path), error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
        !name.ends_with(suffix))
      continue;
    const std::string run = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (run.size() > 10 || run.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto other = static_cast<std::uint32_t>(std::stoull(run));
    if (other == nonce) continue;
    if (auto claim = live_claim(path, other)) live.push_back(*claim);
  }
  return live;
}

// The live claim this run gives way to, if any. Two runs that claim a
// name together may each see the other's claim (each creates, then looks),
// and, a run's outputs being claimed by several ranks, each run could win
// some names and lose others: both would be refused. So:
// - a run that goes ahead (all its claims made, none given way) is given
//   way to at once;
// - of two still looking, the smaller nonce wins: the larger gives way at
//   once, the smaller waits, up to `tie_wait`, for the larger to give way
//   or go ahead. (It does one or the other within its own look.)
std::optional<LiveClaim> claim_given_way_to(const std::string& path, std::uint32_t nonce,
                                            std::chrono::milliseconds tie_wait) {
  const auto deadline = std::chrono::steady_clock::now() + tie_wait;
  for (;;) {
    const auto live = live_claims_of(path, nonce);
    if (live.empty()) return std::nullopt;
    const auto wins =
        std::ranges::find_if(live, [&](const LiveClaim& o) { return o.going || o.nonce < nonce; });
    if (wins != live.end()) return *wins;
    if (std::chrono::steady_clock::now() >= deadline) return live.front();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A rename that never replaces a file: false if `to` exists.
bool rename_unless_taken(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS)
    throw std::runtime_error(failed("naming '" + from + "' '" + to + "'"));
  // No RENAME_NOREPLACE on this file system: look, then rename (two steps).
  struct stat st {};
  if (::lstat(to.c_str(), &st) == 0) return false;
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw std::runtime_error(failed("naming '" + from + "' '" + to + "'"));
  return true;
}

}  // namespace

std::string partial_path(const std::string& path, std::uint32_t nonce) {
  return path + ".run-" + std::to_string(nonce) + ".partial";
}

std::string before_extension(const std::string& path, const std::string& text) {
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  const bool has_extension =
      dot != std::string::npos && dot > 0 && (slash == std::string::npos || dot > slash + 1);
  const auto cut = has_extension ? dot : path.size();
  return path.substr(0, cut) + text + path.substr(cut);
}

std::string kept_path(const std::string& path, std::uint32_t nonce) {
  return before_extension(path, ".run-" + std::to_string(nonce));
}

std::string folder_of(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

namespace {
UsageError cannot_create(const std::string& path, const std::string& option,
                         const std::string& why) {
  return UsageError(option, "cannot create '" + path + "': " + why);
}
void warn_no_locks(const std::string& option, const std::string& path) {
  static bool warned = false;
  if (!warned)
    std::fprintf(stderr,
                 "iotest: warning: %s: %s; another run writing the same outputs is found only "
                 "when publishing\n",
                 option.c_str(), failed("'" + folder_of(path) + "' keeps no file locks").c_str());
  warned = true;
}
UsageError takes_no_new_file(const std::string& path, const std::string& option) {
  return cannot_create(path, option,
                       failed("the folder '" + folder_of(path) + "' takes no new file"));
}

// Removes an output: a file, or a folder output with all it holds.
void remove_output(const std::string& name, bool folder) {
  if (!folder) {
    ::unlink(name.c_str());
    return;
  }
  std::error_code ignored;
  std::filesystem::remove_all(name, ignored);
}

// check_creatable without the probe: a claim's own exclusive create is one.
void check_path(const std::string& path, const std::string& option, bool folder) {
  if (path.empty()) throw UsageError(option, "expected a file name, got an empty one");
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode) && !folder)
    throw cannot_create(path, option, "it is a folder; expected a file name");
  // A folder output replaces only what an earlier run left: a casacore
  // table (its table.dat) or a zarr hierarchy (an MSv4 processing set: its
  // zarr.json, or, a run killed as it published, its groups'), never any
  // other folder or a file.
  const auto earlier_output = [&] {
    namespace fs = std::filesystem;
    const fs::path folder(path);
    if (!S_ISDIR(st.st_mode)) return false;
    if (fs::exists(folder / "table.dat") || fs::exists(folder / "zarr.json")) return true;
    std::error_code error;
    bool groups = false;
    for (const auto& entry : fs::directory_iterator(folder, error)) {
      if (!entry.is_directory() || !fs::exists(entry.path() / "zarr.json")) return false;
      groups = true;
    }
    return groups && !error;
  };
  if (exists && folder && !earlier_output())
    throw cannot_create(path, option,
                        "it exists and is not a MeasurementSet or a processing set; expected a "
                        "new name or an earlier run's output to replace");
  const std::string parent = folder_of(path);
  if (::stat(parent.c_str(), &st) != 0)
    throw cannot_create(path, option, failed("its folder '" + parent + "'"));
  if (!S_ISDIR(st.st_mode)) throw cannot_create(path, option, "'" + parent + "' is not a folder");
}
}  // namespace

void check_creatable(const std::string& path, const std::string& option, bool folder) {
  check_path(path, option, folder);
  static int probes = 0;
  const std::string probe = folder_of(path) + "/.iotest-probe-" + std::to_string(::getpid()) + "-" +
                            std::to_string(probes++);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw takes_no_new_file(path, option);
  ::close(fd);
  ::unlink(probe.c_str());
}

FileClaim::FileClaim(std::string path, std::uint32_t nonce, std::string option, bool folder,
                     std::chrono::milliseconds tie_wait)
    : path_(std::move(path)),
      partial_(partial_path(path_, nonce)),
      lock_path_(lock_path_of(path_, nonce)),
      nonce_(nonce),
      folder_(folder) {
  check_path(path_, option, folder_);
  // The lock first, then the output's name: a run that sees the name sees
  // its lock held (while that run lives).
  lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (lock_fd_ >= 0) {
    struct flock l = claim_lock(F_WRLCK, kClaimByte);
    if (::fcntl(lock_fd_, F_OFD_SETLK, &l) != 0) warn_no_locks(option, path_);
    if (folder_) {
      fd_ = ::mkdir(partial_.c_str(), 0755) == 0
                ? ::open(partial_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                : -1;
    } else {
      fd_ = ::open(partial_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
  }
  if (fd_ < 0) {
    const int error = errno;
    release();
    errno = error;
    if (errno == EEXIST)
      throw UsageError(option, "'" + partial_ +
                                   "' exists: another run of the same number writes '" + path_ +
                                   "'; run again");
    throw takes_no_new_file(path_, option);
  }
  struct stat st {};
  ::fstat(fd_, &st);
  own_dev_ = st.st_dev;
  own_ino_ = st.st_ino;
  // Looked for once this claim is made and locked: of two runs that start
  // together, at least the later to look sees the other (and the smaller
  // nonce wins where both do).
  if (const auto other = claim_given_way_to(path_, nonce_, tie_wait)) {
    release();
    remove_output(partial_, folder_);
    throw UsageError(option, "'" + path_ +
                                 "' is being written by another run (its file in "
                                 "progress: '" +
                                 partial_path(path_, other->nonce) +
                                 "'); give this run another output name, or let that one finish");
  }
  if (::lstat(path_.c_str(), &st) == 0) {
    replaces_ = true;
    replaced_ = identity_of(st);
  }
}

FileClaim::FileClaim(FileClaim&& other) noexcept
    : path_(std::move(other.path_)),
      partial_(std::move(other.partial_)),
      lock_path_(std::move(other.lock_path_)),
      nonce_(other.nonce_),
      fd_(other.fd_),
      lock_fd_(other.lock_fd_),
      own_dev_(other.own_dev_),
      own_ino_(other.own_ino_),
      replaces_(other.replaces_),
      folder_(other.folder_),
      replaced_(other.replaced_),
      state_(other.state_) {
  other.fd_ = -1;
  other.lock_fd_ = -1;
  other.state_ = State::published;  // nothing left for its destructor
}

FileClaim::~FileClaim() {
  try {
    if (state_ == State::claimed && is_ours(partial_)) remove_output(partial_, folder_);
    // Taken but neither committed nor kept (a failure in between): all or none.
    if (state_ == State::linked || state_ == State::swapped || state_ == State::renamed) keep();
  } catch (...) {
  }
  release();
}

void FileClaim::go_ahead() const {
  struct flock l = claim_lock(F_WRLCK, kGoingByte);
  if (lock_fd_ >= 0) ::fcntl(lock_fd_, F_OFD_SETLK, &l);  // (where locks work at all)
}

void FileClaim::release() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (lock_fd_ < 0) return;
  // Its lock file removed while still held (so it is this claim's), then
  // the lock let go.
  struct stat st {};
  if (::fstat(lock_fd_, &st) == 0 && is_inode(lock_path_, st.st_dev, st.st_ino))
    ::unlink(lock_path_.c_str());
  ::close(lock_fd_);
  lock_fd_ = -1;
}

bool FileClaim::is_ours(const std::string& name) const {
  // Held open by this run: its inode is not freed, dev and inode suffice.
  return is_inode(name, own_dev_, own_ino_);
}

std::string FileClaim::another_runs() const {
  return "'" + path_ + "' is another run's output, which took the name while this run wrote";
}

std::string FileClaim::take() {
  if (state_ != State::claimed) throw std::logic_error("an output taken twice");
  if (replaces_) {
    // Swapped at once with what is there; kept swapped only if it is the
    // file that was there when the run began.
    if (::renameat2(AT_FDCWD, partial_.c_str(), AT_FDCWD, path_.c_str(), RENAME_EXCHANGE) == 0) {
      if (is_file(partial_, replaced_)) {
        state_ = State::swapped;
        return {};
      }
      ::renameat2(AT_FDCWD, partial_.c_str(), AT_FDCWD, path_.c_str(), RENAME_EXCHANGE);
      return another_runs();
    }
    if (errno != ENOENT && errno != EINVAL && errno != ENOSYS)
      throw std::runtime_error(failed("replacing '" + path_ + "'"));
    // No exchange on this file system (NFS): look, then replace (two
    // steps; the replaced file is gone even if the run then keeps its own).
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0) {
      if (identity_of(st) != replaced_) return another_runs();
      if (::rename(partial_.c_str(), path_.c_str()) != 0)
        throw std::runtime_error(failed("replacing '" + path_ + "'"));
      state_ = State::renamed;
      return {};
    }
    replaces_ = false;  // removed meanwhile: a new name
  }
  // A second name for the output: the partial name stays until commit().
  // (A folder takes no second name: it is renamed, never over another.)
  if (!folder_ && ::link(partial_.c_str(), path_.c_str()) == 0) {
    state_ = State::linked;
    return {};
  }
  if (!folder_ && errno == EEXIST) return another_runs();
  // No hard links here (some FUSE and object-store file systems).
  if (!rename_unless_taken(partial_, path_)) return another_runs();
  state_ = State::renamed;
  return {};
}

void FileClaim::commit() {
  // linked: the output's partial name; swapped: the replaced file, now
  // under the partial name.
  if (state_ == State::linked) ::unlink(partial_.c_str());
  if (state_ == State::swapped) remove_output(partial_, folder_);
  if (state_ != State::claimed) state_ = State::published;
  release();
}

std::string FileClaim::keep() {
  if (state_ == State::linked && is_ours(path_)) ::unlink(path_.c_str());
  if (state_ == State::swapped)
    ::renameat2(AT_FDCWD, partial_.c_str(), AT_FDCWD, path_.c_str(), RENAME_EXCHANGE);
  if (state_ == State::renamed && is_ours(path_)) ::rename(path_.c_str(), partial_.c_str());
  state_ = State::kept;
  const std::string kept = kept_path(path_, nonce_);
  if (is_ours(partial_) && ::rename(partial_.c_str(), kept.c_str()) != 0)
    throw std::runtime_error(failed("keeping '" + partial_ + "' as '" + kept + "'"));
  release();
  return kept;
}

}  // namespace iotest::storage
