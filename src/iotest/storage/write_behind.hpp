// Write-behind for a file written through the page cache: its write-back
// streams to the device while the writer goes on, rather than piling up
// dirty pages until the kernel's dirty limits stall the writer and the
// fsync at close writes the rest in a burst.
//
// Every `window` bytes the file grows, the window just written is handed
// to the device (sync_file_range SYNC_FILE_RANGE_WRITE), and the window
// before it is waited for and dropped from the page cache
// (POSIX_FADV_DONTNEED): the disk always has the next window, and the page
// cache does not fill with a file nobody reads back. Not durability: the
// fsync at close still makes the file durable, and the time to it is
// counted. The back-ends that append (hdf5's chunks at the end of the file,
// posix's slots, the ms's tiles) are what it serves; a file whose writes go
// back far (rewrites) still gets them written back by the fsync.
//
// The hand-over, the wait and the drop run on a thread of their own, on a
// descriptor of its own: done by the writer, they were 27 % of an ms
// writer's time in writes on the development VM (the hand-over alone does
// ext4's block allocation and submits the I/O, in the caller's time). The
// writer waits only when that thread is kMaxPending windows behind, so at
// most kMaxPending + 2 windows of the file are dirty or in flight.
#pragma once

#include <cstdint>
#include <memory>

namespace iotest::storage {

class WriteBehind {
 public:
  static constexpr std::int64_t kDefaultWindow = 16 << 20;
  static constexpr int kMaxPending = 2;
  // `fd` stays the caller's (the thread works on a duplicate, so the
  // caller may close it at any time); what the file holds now (a header)
  // is the caller's to sync. A window of 0, or fd -1, turns it off.
  explicit WriteBehind(int fd = -1, std::int64_t window = kDefaultWindow);
  WriteBehind(WriteBehind&&) noexcept;
  WriteBehind& operator=(WriteBehind&&) noexcept;
  ~WriteBehind();  // waits for the window being handed on, drops no more
  // After a write of `bytes` at the file's end. The file's size is looked
  // up once a window's worth has been written, not per write.
  void wrote(std::int64_t bytes);
  // Until every window handed over so far is written back and dropped.
  void settle();

 private:
  struct Worker;
  std::int64_t window_ = 0;
  std::int64_t pending_ = 0;  // written since the file's size was last looked up
  std::int64_t started_ = 0;  // handed to the worker up to here
  std::unique_ptr<Worker> worker_;
};

}  // namespace iotest::storage
