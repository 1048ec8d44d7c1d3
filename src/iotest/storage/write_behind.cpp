#include "iotest/storage/write_behind.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace iotest::storage {
namespace {
std::int64_t size_of(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 ? static_cast<std::int64_t>(st.st_size) : 0;
}
}  // namespace

// The thread that hands windows to the device and drops the one before.
// sync_file_range and posix_fadvise are hints here: a file system without
// them (EINVAL, ENOSYS) still gets its data written back by the fsync at
// close, so their errors are ignored; a real write error comes back from
// that fsync.
struct WriteBehind::Worker {
  int fd;
  std::int64_t settled;  // written back and dropped up to here
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<std::int64_t, std::int64_t>> windows;  // handed over, not yet taken
  bool busy = false, stop = false;
  std::thread thread;

  Worker(int dup_fd, std::int64_t start) : fd(dup_fd), settled(start) {
    thread = std::thread([this] { run(); });
  }
  ~Worker() {
    {
      const std::lock_guard<std::mutex> hold(mutex);
      stop = true;
    }
    changed.notify_all();
    thread.join();
    ::close(fd);
  }

  void run() {
    std::unique_lock<std::mutex> hold(mutex);
    for (;;) {
      changed.wait(hold, [&] { return stop || !windows.empty(); });
      if (stop) return;
      const auto [from, to] = windows.front();
      windows.pop_front();
      busy = true;
      hold.unlock();
      hand_on(from, to);
      hold.lock();
      busy = false;
      changed.notify_all();
    }
  }

  void hand_on(std::int64_t from, std::int64_t to) {
    ::sync_file_range(fd, from, to - from, SYNC_FILE_RANGE_WRITE);
    if (from > settled) {
      ::sync_file_range(
          fd, settled, from - settled,
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      ::posix_fadvise(fd, settled, from - settled, POSIX_FADV_DONTNEED);
      settled = from;
    }
  }

  // Queues [from, to); waits while kMaxPending windows are queued already.
  void add(std::int64_t from, std::int64_t to) {
    std::unique_lock<std::mutex> hold(mutex);
    changed.wait(hold, [&] { return windows.size() < static_cast<size_t>(kMaxPending); });
    windows.emplace_back(from, to);
    changed.notify_all();
  }

  void settle() {
    std::unique_lock<std::mutex> hold(mutex);
    changed.wait(hold, [&] { return windows.empty() && !busy; });
  }
};

WriteBehind::WriteBehind(int fd, std::int64_t window) : window_(window) {
  if (fd < 0 || window <= 0) return;
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return;  // a hint: no write-behind, the fsync at close does it all
  started_ = size_of(own);
  worker_ = std::make_unique<Worker>(own, started_);
}

WriteBehind::WriteBehind(WriteBehind&&) noexcept = default;
WriteBehind& WriteBehind::operator=(WriteBehind&&) noexcept = default;
WriteBehind::~WriteBehind() = default;

void WriteBehind::wrote(std::int64_t bytes) {
  pending_ += bytes;
  if (!worker_ || pending_ < window_) return;
  pending_ = 0;
  const std::int64_t end = size_of(worker_->fd);
  if (end - started_ < window_) return;
  worker_->add(started_, end);
  started_ = end;
}

void WriteBehind::settle() {
  if (worker_) worker_->settle();
}

}  // namespace iotest::storage
