// The posix back-end: IOR's POSIX back-end for visibilities, the raw ceiling
// the other back-ends are judged against. Chunks go as raw bytes into one
// file per writer, with a small index so `iotest verify` can read them.
// The format (header, slots, index, JSON, footer) is posix_format.hpp's,
// shared with the S3 back-end; here are the file's side of it: descriptors,
// write-behind, fsync and O_DIRECT.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/output/file_store.hpp"
#include "iotest/storage/posix/posix_format.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/write_behind.hpp"

namespace iotest::storage {
namespace {

using posix_format::kBlock;  // also the O_DIRECT alignment

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " '" + path + "' failed: " + std::strerror(errno));
}

// All of `bytes` at `offset`: a short write (a disk filling up) is retried
// from where it stopped, and the error that ends it (ENOSPC) thrown.
void pwrite_all(int fd, const void* data, std::int64_t bytes, std::int64_t offset,
                const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing", path);
    }
    if (n == 0) throw std::runtime_error("writing '" + path + "' made no progress (disk full?)");
    p += n, bytes -= n, offset += n;
  }
}

// Exactly `bytes` at `offset`; false if the file ends before.
bool pread_all(int fd, void* out, std::int64_t bytes, std::int64_t offset,
               const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("reading", path);
    }
    if (n == 0) return false;
    p += n, bytes -= n, offset += n;
  }
  return true;
}

// A second descriptor of `path` with O_DIRECT (--posix.direct); a file
// system that refuses it (EINVAL: tmpfs on older kernels) is said so.
int open_direct(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL)
    throw std::runtime_error("'" + path +
                             "': the file system does not support O_DIRECT "
                             "(--posix.direct)");
  if (fd < 0) fail("opening with O_DIRECT", path);
  return fd;
}

// Page-aligned memory, as O_DIRECT needs.
struct Free {
  void operator()(void* p) const noexcept { std::free(p); }
};
using PageBuffer = std::unique_ptr<void, Free>;
PageBuffer page_buffer(std::int64_t bytes) {  // bytes: a multiple of kBlock
  void* p = std::aligned_alloc(kBlock, static_cast<size_t>(bytes));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, static_cast<size_t>(bytes));
  return PageBuffer(p);
}

class PosixBackend final : public Backend {
 public:
  PosixBackend(bool direct, bool fsync_each_chunk)
      : direct_(direct), fsync_each_chunk_(fsync_each_chunk) {}
  std::string durability() const override {
    return std::string(direct_ ? "O_DIRECT, " : "write-behind, ") +
           (fsync_each_chunk_ ? "fdatasync per chunk" : "fsync at close");
  }
  ~PosixBackend() override { abort(); }

  void abort() noexcept override {
    close_files(false);
    if (!temp_.empty()) ::unlink(temp_.c_str());
    temp_.clear();
  }

  std::string_view name() const override { return "posix"; }

 protected:
  void do_open(const std::string& partial) override {
    if (!layout().observation) throw std::logic_error("the posix back-end needs the observation");
    abort();
    index_.clear();
    slot_of_.clear();
    chunk_bytes_ = layout().chunk_bytes();
    slot_bytes_ = posix_format::slot_bytes_for(chunk_bytes_);
    const std::string& temp = partial;
    fd_ = ::open(temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("creating", temp);
    temp_ = temp;  // ours from here: abort removes it
    try {
      if (direct_) direct_fd_ = open_direct(temp_, O_RDWR);
      const auto header = posix_format::header(chunk_bytes_, slot_bytes_);
      pwrite_all(fd_, header.data(), posix_format::kHeaderBytes, 0, temp_);
      buffer_ = page_buffer(slot_bytes_);
      if (!direct_) write_behind_ = WriteBehind(fd_);
    } catch (...) {
      abort();
      throw;
    }
  }

  void do_write_chunk(const ChunkKey& key, const cplx* data, bool accumulate,
                      const PresenceWord*) override {
    const std::int64_t id = key.row_chunk * layout().freq_chunks() + key.freq_chunk;
    const int fd = direct_ ? direct_fd_ : fd_;
    auto* buffer = static_cast<char*>(buffer_.get());
    if (accumulate) {
      const auto at = slot_of_.find(id);
      if (at == slot_of_.end()) throw std::logic_error("a chunk rewritten before it was written");
      const std::int64_t offset = slot_offset(at->second);
      if (!pread_all(fd, buffer, slot_bytes_, offset, temp_))
        throw std::runtime_error("reading back a chunk of '" + temp_ + "': the file is short");
      auto* sum = reinterpret_cast<cplx*>(buffer);
      for (index_t i = 0; i < layout().chunk_values(); ++i) sum[i] += data[i];
      pwrite_all(fd, buffer, slot_bytes_, offset, temp_);
      record_checksum(key, buffer);
    } else {
      const auto slot = static_cast<std::int64_t>(index_.size());
      // Straight from the caller's memory where it is a whole slot (and
      // aligned, for O_DIRECT); otherwise padded in the buffer.
      const void* out = data;
      if (chunk_bytes_ != slot_bytes_ ||
          (direct_ && reinterpret_cast<std::uintptr_t>(data) % kBlock != 0)) {
        std::memcpy(buffer, data, static_cast<size_t>(chunk_bytes_));
        std::memset(buffer + chunk_bytes_, 0, static_cast<size_t>(slot_bytes_ - chunk_bytes_));
        out = buffer;
      }
      pwrite_all(fd, out, slot_bytes_, slot_offset(slot), temp_);
      write_behind_.wrote(slot_bytes_);
      index_.push_back(id);
      slot_of_.emplace(id, slot);
      record_checksum(key, out);
    }
    if (fsync_each_chunk_ && ::fdatasync(fd) != 0) fail("fdatasync of", temp_);
  }

  // fsync acts on the file, not the descriptor: one call also covers the
  // O_DIRECT descriptor's writes (their sizes and extents, the device cache).
  void do_flush() override {
    if (::fdatasync(fd_) != 0) fail("fdatasync of", temp_);
  }

  void do_close() override {
    const auto slots = static_cast<std::int64_t>(index_.size());
    const auto trailer =
        posix_format::trailer(layout(), index_, chunk_bytes_, slot_bytes_, written_parts(),
                              checksums(), /*parts_in_slots=*/false);
    pwrite_all(fd_, trailer.data(), static_cast<std::int64_t>(trailer.size()), slot_offset(slots),
               temp_);
    if (::fsync(fd_) != 0) fail("fsync of", temp_);
    close_files(true);
    temp_.clear();  // complete: kept, under its temporary name, until published
    index_ = {};
    slot_of_ = {};
    buffer_.reset();
  }

 private:
  std::int64_t slot_offset(std::int64_t slot) const {
    return posix_format::slot_offset(slot, slot_bytes_);
  }

  // Closing can report a failed write-back (NFS): thrown when `check`.
  void close_files(bool check) {
    write_behind_ = WriteBehind();
    for (int* fd : {&direct_fd_, &fd_}) {
      if (*fd < 0) continue;
      const int status = ::close(*fd);
      *fd = -1;
      if (check && status != 0 && errno != EINTR) fail("closing", temp_);
    }
  }

  const bool direct_, fsync_each_chunk_;
  std::string temp_;    // the partial file while it is ours to remove
  int fd_ = -1;         // buffered: header, trailer, and chunks without O_DIRECT
  int direct_fd_ = -1;  // O_DIRECT chunk writes and read-backs
  std::int64_t chunk_bytes_ = 0, slot_bytes_ = 0;
  PageBuffer buffer_;         // one slot: padding and read-backs for rewrites
  WriteBehind write_behind_;  // through the page cache (without O_DIRECT)
  // Slot -> chunk id (the index written at close) and chunk id -> slot (for
  // rewrites): both proportional to the chunks this writer writes, 8 + 16 B
  // per chunk (plus the hash table's own overhead), not to the observation.
  std::vector<std::int64_t> index_;
  std::unordered_map<std::int64_t, std::int64_t> slot_of_;
};

// A file's bytes, by pread.
class FileRanges final : public posix_format::ByteRanges {
 public:
  explicit FileRanges(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw UsageError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  ~FileRanges() override { ::close(fd_); }
  FileRanges(const FileRanges&) = delete;
  FileRanges& operator=(const FileRanges&) = delete;

  std::int64_t size() const override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("reading the size of", path_);
    return st.st_size;
  }
  bool read(void* out, std::int64_t bytes, std::int64_t offset) const override {
    return pread_all(fd_, out, bytes, offset, path_);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

class PosixReader final : public posix_format::PosixFormatReader {
 public:
  // `direct`: chunks read with O_DIRECT (whole slots into a page-aligned
  // buffer), past the page cache, as `iotest read --posix.direct` measures.
  PosixReader(const std::string& path, bool direct)
      : PosixFormatReader(std::make_unique<FileRanges>(path), path, "posix") {
    if (direct) {
      direct_fd_ = open_direct(path, O_RDONLY);
      buffer_ = page_buffer(slot_bytes());
    }
  }
  ~PosixReader() override {
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }

  bool direct() const override { return direct_fd_ >= 0; }

  static bool recognises(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char start[16] = {};
    const ssize_t n = ::pread(fd, start, sizeof start, 0);
    ::close(fd);
    return n > 0 && posix_format::has_posix_magic(start, static_cast<std::size_t>(n));
  }

 protected:
  // O_DIRECT straight into `out` where it is a page-aligned whole slot,
  // else through the aligned buffer.
  void read_slot(std::int64_t slot, cplx* out) const override {
    if (direct_fd_ < 0) return PosixFormatReader::read_slot(slot, out);
    const std::int64_t offset = posix_format::slot_offset(slot, slot_bytes());
    const bool straight =
        chunk_bytes() == slot_bytes() && reinterpret_cast<std::uintptr_t>(out) % kBlock == 0;
    if (!pread_all(direct_fd_, straight ? static_cast<void*>(out) : buffer_.get(), slot_bytes(),
                   offset, name()))
      throw std::runtime_error(name() + ": reading a chunk failed (the file is short)");
    if (!straight) std::memcpy(out, buffer_.get(), static_cast<size_t>(chunk_bytes()));
  }

 private:
  int direct_fd_ = -1;
  PageBuffer buffer_;  // O_DIRECT: one slot
};

}  // namespace

BackendSpec posix_spec() {
  BackendSpec s;
  s.name = "posix";
  s.store = &file_store();
  s.summary = "raw chunks in one file per writer, with an index (IOR's POSIX: the ceiling)";
  s.options = {
      {"posix.direct", "O_DIRECT chunk writes and read-backs (page-aligned; not every file system)",
       true, ""},
      {"posix.fsync", "sync after every chunk (chunk: fdatasync) or once at flush and close", false,
       "close"},
  };
  s.make = [](const StorageOptions& options) -> std::unique_ptr<Backend> {
    const bool direct = option_flag(options, "posix.direct");
    const bool each_chunk =
        option_choice(options, "posix.fsync", "close", {"chunk", "close"}) == "chunk";
    return std::make_unique<PosixBackend>(direct, each_chunk);
  };
  s.recognises = &PosixReader::recognises;
  s.open = [](const std::string& path, const StorageOptions& options) -> std::unique_ptr<Reader> {
    return std::make_unique<PosixReader>(path, option_flag(options, "posix.direct"));
  };
  return s;
}

}  // namespace iotest::storage
