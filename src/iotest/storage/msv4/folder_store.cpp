// A zarr store in a folder (zarr_store.hpp): each key a file. A put writes
// its file whole on the caller's thread, so a get that follows reads it
// at once; what waits for the device goes on in the background, on
// `in_flight` threads.
//
// A file is durable once its data, its inode and its entry in its folder
// are on the device, and the device's cache flushed. How, depends on the
// file system:
// - a local one (ext4, XFS, btrfs): each file's data is written back by a
//   thread as soon as it is written (sync_file_range, waited for), and
//   flush() is one syncfs, which writes the inodes and folders and
//   flushes the device's cache once. On the development VM
//   (bench/README.md, "MSv4 processing sets") an fsync of each file
//   (4,212 device flushes for a 2.2 GB set) made one writer's stream
//   1.3-1.5x as long, and no write-back before the syncfs 1.6x (the
//   writes and the device took turns).
// - any other (CephFS, Lustre, NFS, FUSE), where syncfs need not reach the
//   servers: an fsync of every file on the threads, and flush() syncs the
//   folders given a file or a folder since the last flush.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "iotest/storage/backend.hpp"
#include "iotest/storage/msv4/zarr_store.hpp"

namespace iotest::storage::msv4 {
// Its own namespace: a unity group compiles several files as one, and the
// other msv4 files may have helpers of the same names.
namespace in_folder {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "fsync of 'PATH' failed: Input/output error (disk full?)". Only an I/O
// error gets storage_failure's guess: the other errnos name their cause
// (ENOSPC, EDQUOT among them), and "(disk full?)" after "Not a directory"
// would mislead.
std::runtime_error failed(const std::string& what, const std::string& path, int error) {
  const std::string text = fmt::format("{} '{}' failed: {}", what, path, std::strerror(error));
  return error == EIO ? storage_failure(text) : std::runtime_error(text);
}

// Zarr's keys and prefixes are relative and '/'-separated. One that could
// name a file outside the root ("../x", "/x") or the same file twice
// ("a//b", "./a") is refused before any file is touched.
bool safe_key(const std::string& key, bool prefix) {
  if (key.empty()) return prefix;
  std::string_view rest = key;
  if (prefix && rest.back() == '/') rest.remove_suffix(1);  // "vis_0/VISIBILITY/c/"
  for (;;) {
    const auto slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    rest.remove_prefix(slash + 1);
  }
}

// The folder part of a key ("" for a key at the root).
std::string folder_of(const std::string& key) {
  const auto slash = key.rfind('/');
  return slash == std::string::npos ? std::string() : key.substr(0, slash);
}

// Whether relative folder `folder` is `prefix`'s folder or under it.
bool under(const std::string& folder, const std::string& prefix) {
  if (prefix.empty()) return true;
  const std::string base = prefix.back() == '/' ? prefix.substr(0, prefix.size() - 1) : prefix;
  return folder == base || folder.rfind(base + "/", 0) == 0;
}

int open_retrying(const std::string& path, int flags, mode_t mode = 0) {
  int fd;
  do fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  while (fd < 0 && errno == EINTR);  // a signal during a slow open (FUSE, NFS)
  return fd;
}

// All of `bytes` written to `fd`: a short write (a disk filling up) goes
// on from where it stopped, and the error that ends it (ENOSPC) is thrown.
void write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
  const auto* p = reinterpret_cast<const char*>(bytes.data());
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw failed("writing", path, errno);
    if (n == 0) throw storage_failure("writing '" + path + "' made no progress");
    p += n, left -= static_cast<std::size_t>(n);
  }
}

// Whether `folder` is on a local file system whose syncfs makes every file
// in it durable (its data, inodes and folders, the device's cache flushed).
bool syncfs_reaches_the_device(const std::string& folder) {
  struct statfs fs {};
  if (::statfs(folder.c_str(), &fs) != 0) return false;
  const auto type = static_cast<unsigned long>(fs.f_type);
  return type == EXT4_SUPER_MAGIC || type == XFS_SUPER_MAGIC || type == BTRFS_SUPER_MAGIC;
}

void sync_folder(const std::string& path) {
  const int fd = open_retrying(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw failed("opening folder", path, errno);
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    throw failed("fsync of folder", path, error);
  }
  ::close(fd);
}

class FolderStore final : public ZarrStore {
 public:
  FolderStore(const std::string& folder, int in_flight);
  ~FolderStore() override;

  const std::string& root() const override { return root_; }
  void put(const std::string& key, Bytes bytes) override {
    put_copy(key, std::span<const std::byte>(bytes));
  }
  void put_copy(const std::string& key, std::span<const std::byte> bytes) override;
  void reserve(const std::string& key) override;
  void remove(const std::string& key) override;
  std::optional<Bytes> get(const std::string& key) override;
  std::vector<std::string> list(const std::string& prefix) override;
  void flush() override;
  void remove_all(const std::string& prefix) noexcept override;
  std::string durability() const override {
    return local_ ? "each file written back as it is written (O_DIRECT where whole pages), then "
                    "syncfs of its file system"
                  : "fsync of every file and folder";
  }
  // A put's bytes are in the page cache when it returns: none held here.
  std::int64_t held_bytes() const override { return 0; }

 private:
  // A file written and not yet synced: its descriptor, open.
  struct Written {
    int fd = -1;
    std::string path;
  };
  std::string path_of(const std::string& key) const { return root_ + "/" + key; }
  void make_root();
  void make_folders(const std::string& folder);
  int write_file(const std::string& path, std::span<const std::byte> bytes, int flags);
  bool direct_for(std::span<const std::byte> bytes) const;
  void hand_over(Written file);
  void sync_files();
  bool next_file(Written& file);
  void synced(const std::string& failure);
  void sync_folders();
  void sync_file_system();
  void throw_failure() const;  // under lock_

  std::string root_;
  const int in_flight_;
  bool root_made_ = false;  // its entry in its parent is ours to sync
  bool local_ = false;      // a local file system: one syncfs makes every file durable
  // Whole pages from a page-aligned buffer go past the page cache
  // (O_DIRECT): on a local file system only, until one refuses it.
  std::atomic<bool> direct_{false};

  // The folders (relative to the root, "" the root) known to exist, and
  // those with entries not yet synced: made, or given a file.
  std::mutex folders_lock_;
  std::unordered_set<std::string> known_;
  std::set<std::string> unsynced_;

  mutable std::mutex lock_;
  std::condition_variable queued_;  // a file to sync; the end
  std::condition_variable synced_;  // a file synced (a slot free), or failed
  std::deque<Written> queue_;
  int pending_ = 0;      // queued or being synced
  std::string failure_;  // the first failed fsync's; empty: none
  bool stopping_ = false;
  std::vector<std::thread> syncers_;  // last: started once the rest is ready
};

FolderStore::FolderStore(const std::string& folder, int in_flight)
    : root_(folder), in_flight_(in_flight) {
  if (in_flight < 1)
    throw std::invalid_argument(
        fmt::format("{}: {} writes in flight (expected 1 or more)", folder, in_flight));
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  if (root_.empty()) throw std::invalid_argument("a zarr store needs a folder (got '')");
  make_root();
  local_ = syncfs_reaches_the_device(root_);
  direct_ = local_;
  for (int i = 0; i < in_flight; ++i) syncers_.emplace_back([this] { sync_files(); });
}

FolderStore::~FolderStore() {
  {
    std::lock_guard lock(lock_);
    stopping_ = true;
    // Files never flushed: an abort's, to be removed. Closed unsynced.
    for (const auto& file : queue_) ::close(file.fd);
    pending_ -= static_cast<int>(queue_.size());
    queue_.clear();
  }
  queued_.notify_all();
  for (auto& syncer : syncers_) syncer.join();
}

void FolderStore::make_root() {
  if (::mkdir(root_.c_str(), 0755) == 0) {
    root_made_ = true;
    unsynced_.insert("");
  } else if (errno == ENOENT) {
    throw std::runtime_error(
        fmt::format("cannot make folder '{}': its parent folder does not exist", root_));
  } else if (errno != EEXIST) {
    throw failed("making folder", root_, errno);
  } else if (struct stat st{}; ::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw std::runtime_error(fmt::format("'{}' is not a folder", root_));
  }
  known_.insert("");
}

// `folder` and the folders above it, where missing, made (and marked for
// the next flush).
void FolderStore::make_folders(const std::string& folder) {
  std::lock_guard lock(folders_lock_);
  if (known_.count(folder)) return;
  for (std::size_t end = 0; end != std::string::npos;) {
    end = folder.find('/', end + 1);
    const std::string step = folder.substr(0, end);
    if (known_.count(step)) continue;
    const std::string path = path_of(step);
    if (::mkdir(path.c_str(), 0755) == 0) {
      unsynced_.insert(step);
      unsynced_.insert(folder_of(step));  // its new entry
    } else if (errno != EEXIST) {         // a file in the way: ENOTDIR; the next open says so
      throw failed("making folder", path, errno);
    }
    known_.insert(step);
  }
}

// The file written whole, opened with `flags` besides (O_DIRECT): its
// descriptor, open for the fsync; -1 where O_DIRECT was asked and the file
// system refuses it (EINVAL at open: nothing written).
//
// Not opened with O_TRUNC: ext4 (auto_da_alloc, its default) takes a file
// truncated to nothing and written as a file being replaced, and starts
// its write-back at close, in the writer's time: for a file made ahead
// (empty) that was every chunk's, and one writer's stream 1.3-1.5x as
// long. What a longer file held before is cut after the write instead.
int FolderStore::write_file(const std::string& path, std::span<const std::byte> bytes, int flags) {
  const int fd = open_retrying(path, O_WRONLY | O_CREAT | flags, 0644);
  if (fd < 0 && errno == EINVAL && (flags & O_DIRECT) != 0) return -1;
  if (fd < 0) throw failed("creating", path, errno);
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw failed("looking at", path, errno);
    write_all(fd, bytes, path);
    if (st.st_size > static_cast<off_t>(bytes.size()) &&
        ::ftruncate(fd, static_cast<off_t>(bytes.size())) != 0)
      throw failed("truncating", path, errno);
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());  // no key left half written
    throw;
  }
  return fd;
}

// Whether `bytes` can go past the page cache: whole pages from a
// page-aligned buffer, on a file system that has not refused O_DIRECT.
bool FolderStore::direct_for(std::span<const std::byte> bytes) const {
  constexpr std::uintptr_t kPage = 4096;
  return direct_ && !bytes.empty() && bytes.size() % kPage == 0 &&
         reinterpret_cast<std::uintptr_t>(bytes.data()) % kPage == 0;
}

// An empty file, its folder's entry synced at the next flush.
void FolderStore::reserve(const std::string& key) {
  if (!safe_key(key, /*prefix=*/false))
    throw std::invalid_argument(fmt::format("{}: '{}' is not a zarr key", root_, key));
  const std::string path = path_of(key), folder = folder_of(key);
  make_folders(folder);
  const int fd = open_retrying(path, O_WRONLY | O_CREAT, 0644);
  if (fd < 0) throw failed("creating", path, errno);
  ::close(fd);
  std::lock_guard lock(folders_lock_);
  unsynced_.insert(folder);
}

void FolderStore::remove(const std::string& key) {
  if (!safe_key(key, /*prefix=*/false)) return;
  const std::string path = path_of(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw failed("removing", path, errno);
  std::lock_guard lock(folders_lock_);
  unsynced_.insert(folder_of(key));
}

void FolderStore::put_copy(const std::string& key, std::span<const std::byte> bytes) {
  const auto start = Clock::now();
  if (!safe_key(key, /*prefix=*/false))
    throw std::invalid_argument(fmt::format("{}: '{}' is not a zarr key", root_, key));
  {
    std::lock_guard lock(lock_);
    throw_failure();  // before more files: the run is failing
  }
  const std::string path = path_of(key);
  const std::string folder = folder_of(key);
  make_folders(folder);
  // Whole pages are written past the page cache and are on the device when
  // write returns: no write-back to wait for, and no copy into the page
  // cache, which took three quarters of one writer's time (issue 58).
  const bool whole_pages = direct_for(bytes);
  int fd = whole_pages ? write_file(path, bytes, O_DIRECT) : -1;
  const bool direct = fd >= 0;
  if (whole_pages && !direct) direct_ = false;  // refused: the page cache from now on
  if (!direct) fd = write_file(path, bytes, 0);
  {
    std::lock_guard lock(folders_lock_);
    unsynced_.insert(folder);  // its new entry
  }
  if (!direct) {
    hand_over({fd, path});
  } else if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(path.c_str());
    throw failed("closing", path, error);
  }
  std::lock_guard lock(lock_);
  ++stats_.keys_written;
  stats_.bytes_written += static_cast<std::int64_t>(bytes.size());
  stats_.put_s += seconds_since(start);
}

// The file queued for a syncer, once fewer than in_flight are pending.
void FolderStore::hand_over(Written file) {
  std::unique_lock lock(lock_);
  synced_.wait(lock, [&] { return pending_ < in_flight_ || !failure_.empty(); });
  if (!failure_.empty()) {
    ::close(file.fd);
    throw_failure();
  }
  queue_.push_back(std::move(file));
  ++pending_;
  queued_.notify_one();
}

void FolderStore::throw_failure() const {
  if (!failure_.empty()) throw std::runtime_error(failure_);
}

void FolderStore::sync_files() {
  Written file;
  while (next_file(file)) {
    std::string failure;
    // Local: the data written back and waited for (its errors are also
    // its fsync's), the rest left to flush()'s syncfs.
    constexpr unsigned kWriteBack =
        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
    if ((local_ ? ::sync_file_range(file.fd, 0, 0, kWriteBack) : ::fsync(file.fd)) != 0)
      failure = failed(local_ ? "writing back" : "fsync of", file.path, errno).what();
    // close reports what fsync may not (NFS's deferred write errors).
    if (::close(file.fd) != 0 && failure.empty())
      failure = failed("closing", file.path, errno).what();
    synced(failure);
  }
}

bool FolderStore::next_file(Written& file) {
  std::unique_lock lock(lock_);
  queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return false;  // stopping, and nothing left
  file = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void FolderStore::synced(const std::string& failure) {
  {
    std::lock_guard lock(lock_);
    --pending_;
    if (failure_.empty()) failure_ = failure;  // the first: later ones may follow from it
  }
  synced_.notify_all();
}

void FolderStore::flush() {
  const auto start = Clock::now();
  {
    std::unique_lock lock(lock_);
    synced_.wait(lock, [&] { return pending_ == 0; });
    throw_failure();
  }
  if (local_)
    sync_file_system();
  else
    sync_folders();
  std::lock_guard lock(lock_);
  stats_.flush_s += seconds_since(start);
}

// One syncfs: every inode and folder of the file system written, the
// device's cache flushed (the data is written back already).
void FolderStore::sync_file_system() {
  const int fd = open_retrying(root_, O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw failed("opening folder", root_, errno);
  if (::syncfs(fd) != 0) {
    const int error = errno;
    ::close(fd);
    throw failed("syncfs of the file system of", root_, error);
  }
  ::close(fd);
  std::lock_guard lock(folders_lock_);
  unsynced_.clear();
  root_made_ = false;
}

// The folders with new entries (files, folders made), deepest first, so a
// folder is durable before its entry in its parent is; then the root's
// parent when the root is new.
void FolderStore::sync_folders() {
  std::lock_guard lock(folders_lock_);
  std::vector<std::string> deepest_first(unsynced_.begin(), unsynced_.end());
  const auto depth = [](const std::string& f) {
    return f.empty() ? 0 : 1 + std::count(f.begin(), f.end(), '/');
  };
  std::stable_sort(deepest_first.begin(), deepest_first.end(),
                   [&](const auto& a, const auto& b) { return depth(a) > depth(b); });
  for (const auto& folder : deepest_first) sync_folder(folder.empty() ? root_ : path_of(folder));
  if (root_made_) {
    const fs::path parent = fs::path(root_).parent_path();
    sync_folder(parent.empty() ? "." : parent.string());
    root_made_ = false;
  }
  unsynced_.clear();
}

std::optional<Bytes> FolderStore::get(const std::string& key) {
  if (!safe_key(key, /*prefix=*/false)) return std::nullopt;  // no such key can be put
  const std::string path = path_of(key);
  const int fd = open_retrying(path, O_RDONLY);
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) return std::nullopt;
  if (fd < 0) throw failed("opening", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // a folder is no key
    ::close(fd);
    return std::nullopt;
  }
  // A key is written whole before its put returns: its size is final.
  Bytes bytes(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw failed("reading", path, error);
    }
    if (n == 0) break;  // cut short meanwhile (removed by an abort)
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  return bytes;
}

std::vector<std::string> FolderStore::list(const std::string& prefix) {
  std::vector<std::string> keys;
  if (!safe_key(prefix, /*prefix=*/true)) return keys;
  const fs::path folder = prefix.empty() ? fs::path(root_) : fs::path(path_of(prefix));
  std::error_code error;
  if (!fs::is_directory(folder, error)) return keys;  // nothing put under it
  for (auto it = fs::recursive_directory_iterator(folder, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file(error))
      keys.push_back(it->path().lexically_relative(root_).generic_string());
  }
  if (error) throw failed("listing", folder.string(), error.value());
  return keys;
}

void FolderStore::remove_all(const std::string& prefix) noexcept {
  if (!safe_key(prefix, /*prefix=*/true)) return;
  std::error_code error;  // ignored: an abort removes what it can
  if (prefix.empty()) {
    for (auto it = fs::directory_iterator(root_, error); !error && it != fs::directory_iterator();
         it.increment(error))
      fs::remove_all(it->path(), error);
  } else if (fs::is_directory(path_of(prefix), error)) {
    fs::remove_all(path_of(prefix), error);
  }
  // Folders removed are neither known to exist nor to be synced.
  std::lock_guard lock(folders_lock_);
  std::erase_if(known_, [&](const std::string& f) { return !f.empty() && under(f, prefix); });
  std::erase_if(unsynced_, [&](const std::string& f) { return !f.empty() && under(f, prefix); });
}

}  // namespace
}  // namespace in_folder

std::unique_ptr<ZarrStore> folder_store(const std::string& folder, int in_flight) {
  return std::make_unique<in_folder::FolderStore>(folder, in_flight);
}

}  // namespace iotest::storage::msv4
