#include "iotest/storage/write_behind.hpp"

#include <fcntl.h>

namespace iotest::storage {

void WriteBehind::wrote(std::int64_t end) {
  if (fd_ < 0 || window_ <= 0 || end - started_ < window_) return;
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
