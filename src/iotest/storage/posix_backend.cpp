// The posix back-end: IOR's POSIX back-end for visibilities, the raw ceiling
// the other back-ends are judged against. Chunks go as raw bytes into one
// file per writer, with a small index so `iotest verify` can read them.
//
// File format (integers are int64, little-endian; offsets in bytes):
//   header   [0, 4096): "IOTEST-POSIX-1\n" (15 bytes, then a zero byte);
//            at 16 the header size (4096), at 24 the chunk bytes, at 32 the
//            slot bytes; the rest zero.
//   slots    slot k at 4096 + k * slot_bytes: one chunk, time_chunk x
//            freq_chunk complex doubles (re, im) row-major, the bytes
//            write_chunk is given, zero-padded to slot_bytes (the chunk bytes
//            rounded up to 4096). A chunk takes the next slot when first
//            written: writes are sequential, the file holds only this
//            writer's chunks and is never sparse (ext4 caps a sparse file's
//            reach at 16 TiB, which one file per writer of the whole
//            observation's shape would pass).
//   index    at 4096 + slots * slot_bytes: each slot's chunk id (row_chunk *
//            freq_chunks + freq_chunk), in slot order.
//   JSON     right after the index: the layout (baselines, times, channels,
//            time_chunk, freq_chunk), chunk_bytes, slot_bytes, slots, the
//            frequencies in Hz, the observation that rebuilds (u, v, w)
//            (vis_set, time, freq, dec_deg: make_observation's options), the
//            provenance (null without) and the written parts (N x 4).
//   footer   the last 64 bytes: "IOTEST-POSIX-END", the index's offset and
//            bytes, the JSON's offset and bytes, the file's size (footer
//            included), zero.
// The index, JSON and footer are written at close, so a file without a valid
// footer was not completed and readers refuse it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/reader.hpp"
#include "iotest/storage/provenance_json.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/write_behind.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::storage {
namespace {

using nlohmann::json;

// Values are written as they lie in memory.
static_assert(std::endian::native == std::endian::little, "the posix format is little-endian");

constexpr std::int64_t kBlock = 4096;  // header size, slot granule, O_DIRECT alignment
constexpr char kMagic[] = "IOTEST-POSIX-1\n";
constexpr std::size_t kMagicBytes = sizeof(kMagic) - 1;
constexpr char kFooterMagic[] = "IOTEST-POSIX-END";
constexpr std::size_t kFooterMagicBytes = sizeof(kFooterMagic) - 1;
constexpr std::int64_t kFooterBytes = 64;
constexpr std::int64_t kCplxBytes = static_cast<std::int64_t>(sizeof(cplx));

std::int64_t round_up(std::int64_t n, std::int64_t to) {
  return (n + to - 1) / to * to;
}

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

void put_i64(char* at, std::int64_t v) {
  std::memcpy(at, &v, sizeof v);
}
std::int64_t get_i64(const char* at) {
  std::int64_t v = 0;
  std::memcpy(&v, at, sizeof v);
  return v;
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
  void do_open(const std::string& path) override {
    if (!layout().observation) throw std::logic_error("the posix back-end needs the observation");
    abort();
    index_.clear();
    slot_of_.clear();
    chunk_bytes_ = layout().chunk_bytes();
    slot_bytes_ = round_up(chunk_bytes_, kBlock);
    const std::string temp = partial_of(path);
    fd_ = ::open(temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("creating", temp);
    temp_ = temp;  // ours from here: abort removes it
    try {
      if (direct_) direct_fd_ = open_direct(temp_, O_RDWR);
      std::array<char, kBlock> header{};
      std::memcpy(header.data(), kMagic, kMagicBytes);
      put_i64(header.data() + 16, kBlock);
      put_i64(header.data() + 24, chunk_bytes_);
      put_i64(header.data() + 32, slot_bytes_);
      pwrite_all(fd_, header.data(), kBlock, 0, temp_);
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
    const std::int64_t index_offset = kBlock + slots * slot_bytes_;
    const std::int64_t index_bytes = slots * static_cast<std::int64_t>(sizeof(std::int64_t));
    const std::string text = describe().dump();
    const auto text_bytes = static_cast<std::int64_t>(text.size());
    std::vector<char> trailer(static_cast<size_t>(index_bytes + text_bytes + kFooterBytes), '\0');
    if (slots > 0) std::memcpy(trailer.data(), index_.data(), static_cast<size_t>(index_bytes));
    std::memcpy(trailer.data() + index_bytes, text.data(), text.size());
    char* footer = trailer.data() + index_bytes + text_bytes;
    std::memcpy(footer, kFooterMagic, kFooterMagicBytes);
    put_i64(footer + 16, index_offset);
    put_i64(footer + 24, index_bytes);
    put_i64(footer + 32, index_offset + index_bytes);
    put_i64(footer + 40, text_bytes);
    put_i64(footer + 48, index_offset + static_cast<std::int64_t>(trailer.size()));
    pwrite_all(fd_, trailer.data(), static_cast<std::int64_t>(trailer.size()), index_offset, temp_);
    if (::fsync(fd_) != 0) fail("fsync of", temp_);
    close_files(true);
    temp_.clear();  // complete: kept, under its temporary name, until published
    index_ = {};
    slot_of_ = {};
    buffer_.reset();
  }

 private:
  std::int64_t slot_offset(std::int64_t slot) const { return kBlock + slot * slot_bytes_; }

  json describe() const {
    const auto& obs = *layout().observation;
    json doc;
    doc["format"] = "iotest-posix";
    doc["version"] = 1;
    doc["layout"] = {{"baselines", layout().baselines},
                     {"times", layout().times},
                     {"channels", layout().channels},
                     {"time_chunk", layout().time_chunk},
                     {"freq_chunk", layout().freq_chunk}};
    doc["chunk_bytes"] = chunk_bytes_;
    doc["slot_bytes"] = slot_bytes_;
    doc["slots"] = index_.size();
    std::vector<double> freq;
    for (index_t k = 0; k < layout().channels; ++k) freq.push_back(obs.freq.at(k));
    doc["frequencies_hz"] = freq;
    // The observation as written (what a run's Provenance::observation
    // holds, present also without provenance): (u, v, w) are rebuilt from it.
    doc["observation"] = observation_options_json({obs.vis_set, obs.time.text(), obs.freq.text(), obs.dec_deg});
    doc["provenance"] = layout().provenance ? provenance_json(*layout().provenance) : json(nullptr);
    json parts = json::array();
    for (const auto& p : written_parts())
      parts.push_back(json::array({p.w_stack, p.subgrid, p.row_chunk_begin, p.row_chunk_end}));
    doc["written_parts"] = std::move(parts);
    json sums = json::array();
    for (const auto& c : checksums()) sums.push_back(json::array({c.chunk, c.crc32}));
    doc["chunk_crc32"] = std::move(sums);
    return doc;
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

class PosixReader final : public Reader {
 public:
  // `direct`: chunks read with O_DIRECT (whole slots into a page-aligned
  // buffer), past the page cache, as `iotest read --posix.direct` measures.
  PosixReader(const std::string& path, bool direct) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw UsageError(path, std::string("cannot open: ") + std::strerror(errno));
    try {
      load();
      if (direct) {
        direct_fd_ = open_direct(path, O_RDONLY);
        buffer_ = page_buffer(slot_bytes_);
      }
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
  ~PosixReader() override {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }
  PosixReader(const PosixReader&) = delete;
  PosixReader& operator=(const PosixReader&) = delete;

  std::string_view backend() const override { return "posix"; }
  bool direct() const override { return direct_fd_ >= 0; }

  // From the rebuilt observation, as the hdf5 back-end computes its
  // uvw_array: antenna a2 minus antenna a1 at the row's time step. O(antennas)
  // per call, no state, so calls from several threads are safe.
  std::array<double, 3> uvw(index_t row) const override {
    const index_t b = row / ntimes_, t = row % ntimes_;
    const auto [a1, a2] = baselines_.at(static_cast<size_t>(b));
    const auto at = obs_.antenna_uvw(t);
    const auto& p1 = at[static_cast<size_t>(a1)];
    const auto& p2 = at[static_cast<size_t>(a2)];
    return {p2.u - p1.u, p2.v - p1.v, p2.w - p1.w};
  }

  std::vector<WrittenPart> written_parts() const override { return parts_; }
  std::vector<ChunkChecksum> checksums() const override { return checksums_; }
  index_t chunks_present() const override { return static_cast<index_t>(slots_.size()); }

  std::vector<bool> chunk_map() const override {
    std::vector<bool> map(static_cast<size_t>(chunks_expected()), false);
    for (const auto& [id, slot] : slots_) map[static_cast<size_t>(id)] = true;
    return map;
  }

  bool chunk_present(index_t row, index_t channel) const override {
    return slot_of(chunk_id(row / chunk_rows_, channel / chunk_channels_)) >= 0;
  }

  // An absent chunk reads as zero (as the hdf5 reader's fill value): verify's
  // chunk checks report it.
  cplx visibility(index_t row, index_t channel) const override {
    const std::int64_t slot = slot_of(chunk_id(row / chunk_rows_, channel / chunk_channels_));
    if (slot < 0) return {};
    const index_t within = row % chunk_rows_ * chunk_channels_ + channel % chunk_channels_;
    cplx v;
    if (!pread_all(fd_, &v, kCplxBytes, slot_offset(slot) + within * kCplxBytes, path_))
      throw std::runtime_error(path_ + ": reading a visibility failed (the file is short)");
    return v;
  }

  bool read_chunk(const ChunkKey& key, cplx* out) const override {
    const std::int64_t slot = slot_of(chunk_id(key.row_chunk, key.freq_chunk));
    if (slot < 0) return false;
    // O_DIRECT straight into `out` where it is a page-aligned whole slot,
    // else through the aligned buffer.
    const bool straight = direct_fd_ >= 0 && chunk_bytes_ == slot_bytes_ &&
                          reinterpret_cast<std::uintptr_t>(out) % kBlock == 0;
    const bool read =
        direct_fd_ < 0 ? pread_all(fd_, out, chunk_bytes_, slot_offset(slot), path_)
        : straight     ? pread_all(direct_fd_, out, slot_bytes_, slot_offset(slot), path_)
                   : pread_all(direct_fd_, buffer_.get(), slot_bytes_, slot_offset(slot), path_);
    if (!read) throw std::runtime_error(path_ + ": reading a chunk failed (the file is short)");
    if (direct_fd_ >= 0 && !straight)
      std::memcpy(out, buffer_.get(), static_cast<size_t>(chunk_bytes_));
    zero_past_edges(key, out);  // the writer's values there are ignored
    return true;
  }

  // Slot order: the order the writer wrote them, sequential on disk.
  std::vector<ChunkKey> stored_chunks() const override {
    std::vector<std::pair<std::int64_t, std::int64_t>> by_slot;
    by_slot.reserve(slots_.size());
    for (const auto& [id, slot] : slots_) by_slot.emplace_back(slot, id);
    std::sort(by_slot.begin(), by_slot.end());
    std::vector<ChunkKey> keys;
    keys.reserve(by_slot.size());
    for (const auto& [slot, id] : by_slot)
      keys.push_back({id / channel_chunks(), id % channel_chunks()});
    return keys;
  }

  static bool recognises(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char start[kMagicBytes] = {};
    const bool ours = ::pread(fd, start, kMagicBytes, 0) == static_cast<ssize_t>(kMagicBytes) &&
                      std::memcmp(start, kMagic, kMagicBytes) == 0;
    ::close(fd);
    return ours;
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const { throw UsageError(path_, why); }

  void load() {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("reading the size of", path_);
    const std::int64_t size = st.st_size;
    const std::string incomplete =
        "is not a complete posix output (no valid footer: its writer did not finish it)";
    std::array<char, kBlock> header{};
    std::array<char, kFooterBytes> footer{};
    if (size < kBlock + kFooterBytes || !pread_all(fd_, header.data(), kBlock, 0, path_) ||
        !pread_all(fd_, footer.data(), kFooterBytes, size - kFooterBytes, path_))
      refuse(incomplete);
    if (std::memcmp(header.data(), kMagic, kMagicBytes) != 0)
      refuse("not a posix output of iotest (no IOTEST-POSIX-1 header)");
    if (std::memcmp(footer.data(), kFooterMagic, kFooterMagicBytes) != 0) refuse(incomplete);
    chunk_bytes_ = get_i64(header.data() + 24);
    slot_bytes_ = get_i64(header.data() + 32);
    const std::int64_t index_offset = get_i64(footer.data() + 16),
                       index_bytes = get_i64(footer.data() + 24),
                       json_offset = get_i64(footer.data() + 32),
                       json_bytes = get_i64(footer.data() + 40);
    const std::int64_t slots = index_bytes / static_cast<std::int64_t>(sizeof(std::int64_t));
    if (get_i64(header.data() + 16) != kBlock || chunk_bytes_ <= 0 || slot_bytes_ <= 0 ||
        slot_bytes_ % kBlock != 0 || slot_bytes_ < chunk_bytes_ || index_bytes < 0 ||
        index_bytes % 8 != 0 || index_offset != kBlock + slots * slot_bytes_ ||
        json_offset != index_offset + index_bytes || json_bytes < 0 ||
        json_offset + json_bytes + kFooterBytes != size || get_i64(footer.data() + 48) != size)
      refuse(incomplete + ": its header and footer disagree with its size");

    std::vector<std::int64_t> ids(static_cast<size_t>(slots));
    std::string text(static_cast<size_t>(json_bytes), '\0');
    if (!pread_all(fd_, ids.data(), index_bytes, index_offset, path_) ||
        !pread_all(fd_, text.data(), json_bytes, json_offset, path_))
      refuse(incomplete);
    try {
      const json doc = json::parse(text);
      const auto& l = doc.at("layout");
      nbls_ = l.at("baselines").get<index_t>();
      ntimes_ = l.at("times").get<index_t>();
      nfreqs_ = l.at("channels").get<index_t>();
      chunk_rows_ = l.at("time_chunk").get<index_t>();
      chunk_channels_ = l.at("freq_chunk").get<index_t>();
      freq_ = doc.at("frequencies_hz").get<std::vector<double>>();
      if (nbls_ < 1 || ntimes_ < 1 || nfreqs_ < 1 || chunk_rows_ < 1 || chunk_channels_ < 1 ||
          static_cast<index_t>(freq_.size()) != nfreqs_ ||
          doc.at("slots").get<std::int64_t>() != slots ||
          doc.at("chunk_bytes").get<std::int64_t>() != chunk_bytes_ ||
          doc.at("slot_bytes").get<std::int64_t>() != slot_bytes_ ||
          chunk_rows_ * chunk_channels_ * kCplxBytes != chunk_bytes_)
        refuse("its index does not match its header (not written by this iotest?)");
      if (!doc.at("provenance").is_null()) provenance_ = provenance_from(doc.at("provenance"));
      for (const auto& p : doc.at("written_parts"))
        parts_.push_back({p.at(0).get<std::int64_t>(), p.at(1).get<std::int64_t>(),
                          p.at(2).get<std::int64_t>(), p.at(3).get<std::int64_t>()});
      observation_ = observation_options_from(doc.at("observation"));
      for (const auto& c : doc.value("chunk_crc32", json::array()))
        checksums_.push_back({c.at(0).get<std::int64_t>(), c.at(1).get<std::uint32_t>()});
    } catch (const json::exception& e) {
      refuse(std::string("its index is not iotest's posix JSON: ") + e.what());
    }
    try {
      obs_ = telescope::make_observation(observation_);
    } catch (const UsageError& e) {
      refuse("its observation cannot be rebuilt: " + e.one_line());
    } catch (const std::runtime_error& e) {  // a layout file of one's own, now unreadable
      refuse(std::string("its observation cannot be rebuilt: ") + e.what());
    }
    if (obs_.baseline_count() != nbls_ || obs_.time.steps != ntimes_ || obs_.freq.steps != nfreqs_)
      refuse("its observation, rebuilt, has another shape than its data");
    baselines_ = obs_.baselines();

    // Chunk id -> slot, sorted by id: 16 B per chunk present, looked up by
    // bisection (one file of many holds few of the observation's chunks).
    slots_.reserve(ids.size());
    for (std::int64_t k = 0; k < slots; ++k) {
      const std::int64_t id = ids[static_cast<size_t>(k)];
      if (id < 0 || id >= chunks_expected())
        refuse("its index lists a chunk outside the observation");
      slots_.emplace_back(id, k);
    }
    std::sort(slots_.begin(), slots_.end());
    if (std::adjacent_find(slots_.begin(), slots_.end(), [](const auto& a, const auto& b) {
          return a.first == b.first;
        }) != slots_.end())
      refuse("its index lists a chunk twice");
  }

  std::int64_t chunk_id(index_t row_chunk, index_t channel_chunk) const {
    return row_chunk * channel_chunks() + channel_chunk;
  }
  std::int64_t slot_of(std::int64_t id) const {
    const auto at = std::lower_bound(slots_.begin(), slots_.end(),
                                     std::pair<std::int64_t, std::int64_t>(id, -1));
    return at != slots_.end() && at->first == id ? at->second : -1;
  }
  std::int64_t slot_offset(std::int64_t slot) const { return kBlock + slot * slot_bytes_; }

 private:
  std::string path_;
  int fd_ = -1, direct_fd_ = -1;
  PageBuffer buffer_;  // O_DIRECT: one slot
  std::int64_t chunk_bytes_ = 0, slot_bytes_ = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> slots_;  // (chunk id, slot), by id
  std::vector<WrittenPart> parts_;
  std::vector<ChunkChecksum> checksums_;
  telescope::ObservationOptions observation_;
  telescope::Observation obs_;
  std::vector<std::pair<int, int>> baselines_;
};

}  // namespace

BackendSpec posix_spec() {
  BackendSpec s;
  s.name = "posix";
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
