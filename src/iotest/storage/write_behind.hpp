// Write-behind for a file written through the page cache: its write-back
// streams to the device while the writer goes on, rather than piling up
// dirty pages until the kernel's dirty limits stall the writer and the
// fsync at close writes the rest in a burst.
//
// Every `window` bytes the file grows, the window just written is handed
// to the device (sync_file_range SYNC_FILE_RANGE_WRITE, which does not
// wait), and the window before it is waited for and dropped from the page
// cache (POSIX_FADV_DONTNEED): at most two windows of the file are in
// flight or dirty, the disk always has the next one, and the page cache
// does not fill with a file nobody reads back. Not durability: the fsync
// at close still makes the file durable, and the time to it is counted.
// The back-ends that append (hdf5's chunks at the end of the file, posix's
// slots) are what it serves; a file whose writes go back far (rewrites)
// still gets them written back by the fsync.
#pragma once

#include <cstdint>

namespace iotest::storage {

class WriteBehind {
 public:
  static constexpr std::int64_t kDefaultWindow = 16 << 20;
  // `fd` stays the caller's; what the file holds now (a header) is the
  // caller's to sync. A window of 0 turns it off.
  explicit WriteBehind(int fd = -1, std::int64_t window = kDefaultWindow);
  // After a write of `bytes` at the file's end. The file's size is looked
  // up once a window's worth has been written, not per write.
  void wrote(std::int64_t bytes);

 private:
  int fd_;
  std::int64_t window_;
  std::int64_t pending_ = 0;  // written since the file's size was last looked up
  std::int64_t started_ = 0;  // handed to the device up to here
  std::int64_t settled_ = 0;  // written back and dropped up to here
};

}  // namespace iotest::storage
