#include "iotest/storage/write_behind.hpp"

#include <fcntl.h>
#include <sys/stat.h>

namespace iotest::storage {
namespace {
std::int64_t size_of(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 ? static_cast<std::int64_t>(st.st_size) : 0;
}
}  // namespace

WriteBehind::WriteBehind(int fd, std::int64_t window)
    : fd_(fd), window_(window), started_(size_of(fd)), settled_(started_) {}

void WriteBehind::wrote(std::int64_t bytes) {
  pending_ += bytes;
  if (fd_ < 0 || window_ <= 0 || pending_ < window_) return;
  pending_ = 0;
  const std::int64_t end = size_of(fd_);
  if (end - started_ < window_) return;
  // Hints: a file system without them (EINVAL, ENOSYS) still gets its
  // data written back by the fsync at close, so their errors are ignored;
  // a real write error comes back from that fsync.
  ::sync_file_range(fd_, started_, end - started_, SYNC_FILE_RANGE_WRITE);
  if (started_ > settled_) {
    ::sync_file_range(
        fd_, settled_, started_ - settled_,
        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    ::posix_fadvise(fd_, settled_, started_ - settled_, POSIX_FADV_DONTNEED);
    settled_ = started_;
  }
  started_ = end;
}

}  // namespace iotest::storage
