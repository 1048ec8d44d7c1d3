// The posix format: iotest's raw chunks with an index, written by the posix
// back-end (one file per writer) and the S3 back-end (one object per
// writer). Here are what a writer needs to lay the bytes out and a reader
// of them over any source of byte ranges; no file descriptors.
//
// Layout (integers are int64, little-endian; offsets in bytes):
//   header   [0, 4096): "IOTEST-POSIX-1\n" (15 bytes, then a zero byte);
//            at 16 the header size (4096), at 24 the chunk bytes, at 32 the
//            slot bytes; the rest zero.
//   slots    slot k at 4096 + k * slot_bytes: one chunk, time_chunk x
//            freq_chunk complex doubles (re, im) row-major, zero-padded to
//            slot_bytes (the chunk bytes rounded up to 4096). A chunk takes
//            the next slot when first written: writes are sequential, the
//            output holds only its writer's chunks and a file is never
//            sparse (ext4 caps a sparse file's reach at 16 TiB, which one
//            file per writer of the whole observation's shape would pass).
//   index    at 4096 + slots * slot_bytes: each slot's chunk id (row_chunk *
//            freq_chunks + freq_chunk), in slot order.
//   JSON     right after the index: the layout (baselines, times, channels,
//            time_chunk, freq_chunk), chunk_bytes, slot_bytes, slots, the
//            frequencies in Hz, the observation that rebuilds (u, v, w)
//            (vis_set, time, freq, dec_deg: make_observation's options), the
//            provenance (null without), the written parts (N x 4), the
//            chunks' CRC-32s (N x 2) and, only where true, parts_in_slots.
//   footer   the last 64 bytes: "IOTEST-POSIX-END", the index's offset and
//            bytes, the JSON's offset and bytes, the output's size (footer
//            included), zero.
// The index, JSON and footer are written at close, so an output without a
// valid footer was not completed and readers refuse it.
//
// parts_in_slots: a writer that cannot read back a chunk it has written (an
// object being uploaded) writes a chunk's later values as parts, each in a
// slot of its own, so the index may list a chunk several times. A part holds
// its values and zero bits elsewhere, and a chunk's parts never share a
// value (each visibility comes from one subgrid), so the chunk is the XOR
// of its slots' bytes: exact, where a sum would turn -0.0 into +0.0.
// Without the key (every file of the posix back-end) a chunk listed twice
// is refused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "iotest/storage/backend.hpp"
#include "iotest/storage/reader.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::storage::posix_format {

inline constexpr std::int64_t kBlock = 4096;  // slot granule, O_DIRECT alignment
inline constexpr std::int64_t kHeaderBytes = kBlock;
inline constexpr std::int64_t kFooterBytes = 64;

// A chunk's slot: its bytes rounded up to kBlock.
std::int64_t slot_bytes_for(std::int64_t chunk_bytes);
// Where slot `slot` starts; slot_offset(slots, ...) is where the trailer goes.
inline std::int64_t slot_offset(std::int64_t slot, std::int64_t slot_bytes) {
  return kHeaderBytes + slot * slot_bytes;
}

// The header, the output's first kHeaderBytes.
std::array<char, kHeaderBytes> header(std::int64_t chunk_bytes, std::int64_t slot_bytes);
// What follows the last slot, at slot_offset(index.size(), slot_bytes):
// the index (`index`: slot -> chunk id), the JSON and the footer. `layout`
// needs its observation. `parts_in_slots`: the index may list a chunk in
// several slots, each holding a part of it (see above).
std::vector<char> trailer(const VisibilityLayout& layout, const std::vector<std::int64_t>& index,
                          std::int64_t chunk_bytes, std::int64_t slot_bytes,
                          const std::vector<WrittenPart>& parts,
                          const std::vector<ChunkChecksum>& checksums, bool parts_in_slots);

// Whether an output's first `n` bytes start with the format's header magic.
bool has_posix_magic(const void* first_bytes, std::size_t n);

// Where a posix-format output's bytes come from: a file (pread), an object
// (ranged GETs).
class ByteRanges {
 public:
  virtual ~ByteRanges() = default;
  virtual std::int64_t size() const = 0;
  // Exactly `bytes` at `offset` into `out`; false if the source ends before.
  virtual bool read(void* out, std::int64_t bytes, std::int64_t offset) const = 0;
};

// A posix-format output read through its ByteRanges. `name` (a path, a URL)
// is what refusals name; `backend_name` what backend() says. Refuses an
// incomplete or inconsistent output (UsageError naming `name`).
class PosixFormatReader : public Reader {
 public:
  PosixFormatReader(std::unique_ptr<ByteRanges> source, std::string name, std::string backend_name);
  PosixFormatReader(const PosixFormatReader&) = delete;
  PosixFormatReader& operator=(const PosixFormatReader&) = delete;

  std::string_view backend() const override { return backend_name_; }
  std::array<double, 3> uvw(index_t row) const override;
  std::vector<WrittenPart> written_parts() const override { return parts_; }
  std::vector<ChunkChecksum> checksums() const override { return checksums_; }
  index_t chunks_present() const override { return chunks_present_; }
  std::vector<bool> chunk_map() const override;
  bool chunk_present(index_t row, index_t channel) const override;
  cplx visibility(index_t row, index_t channel) const override;
  bool read_chunk(const ChunkKey& key, cplx* out) const override;
  std::vector<ChunkKey> stored_chunks() const override;

 protected:
  // A slot's chunk bytes into `out` (chunk_bytes()): by default from the
  // source; a file read past the page cache does it its own way. Throws if
  // the source is short.
  virtual void read_slot(std::int64_t slot, cplx* out) const;
  const ByteRanges& source() const { return *source_; }
  const std::string& name() const { return name_; }
  std::int64_t chunk_bytes() const { return chunk_bytes_; }
  std::int64_t slot_bytes() const { return slot_bytes_; }

 private:
  using SlotEntry = std::pair<std::int64_t, std::int64_t>;  // (chunk id, slot)
  [[noreturn]] void refuse(const std::string& why) const;
  void load();
  void load_json(const std::string& text, std::int64_t slots);
  void rebuild_observation();
  void load_index(const std::vector<std::int64_t>& ids);
  std::int64_t chunk_id(index_t row_chunk, index_t channel_chunk) const {
    return row_chunk * channel_chunks() + channel_chunk;
  }
  // The chunk's slots, in slot order (none: absent).
  std::span<const SlotEntry> slots_of(std::int64_t id) const;

  std::unique_ptr<ByteRanges> source_;
  std::string name_, backend_name_;
  std::int64_t chunk_bytes_ = 0, slot_bytes_ = 0;
  bool parts_in_slots_ = false;
  index_t chunks_present_ = 0;    // distinct chunks
  std::vector<SlotEntry> slots_;  // by chunk id, then slot
  std::vector<WrittenPart> parts_;
  std::vector<ChunkChecksum> checksums_;
  telescope::ObservationOptions observation_;
  telescope::Observation obs_;
  std::vector<std::pair<int, int>> baselines_;
};

}  // namespace iotest::storage::posix_format
