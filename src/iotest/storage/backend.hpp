// Storage back-ends for visibilities, behind one small interface (as IOR's
// back-ends; the list is in registry.hpp). A back-end writes where its
// output's claim says (OutputClaim::partial()), and the claim publishes it
// once every rank has finished (output/output_claim.hpp), so a run that
// fails leaves nothing that looks complete.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <compare>
#include <complex>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/storage/storage_progress.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::storage {

// A sky's visibilities are in Jy (docs/imaging.md, Units).
inline constexpr const char* kJanskyUnits = "Jy";

// What a visibility file holds: the observation's axes and metadata. The
// order is baseline-major, time fastest (UVH5 "baseline, time"); one
// time-chunk x freq-chunk block of one baseline is one storage chunk.
// Where the visibilities came from, stored with them (UVH5
// extra_keywords) so `iotest verify` can recompute them.
struct Provenance {
  std::string rec_set;
  double pixel_lm = 0;  // image pixel in direction cosines
  index_t source_count = 0;
  std::uint64_t seed = 0;
  // --synthetic-vis: the values are degrid::synthetic_visibility's pattern,
  // not a sky's (the storage-only mode).
  bool synthetic = false;
  // What rebuilds the run's binning (which visibilities each visit holds),
  // for checking a stonewalled set: the observation as resolved, the
  // subgrids' margin and the w-stacking step.
  telescope::ObservationOptions observation;
  index_t margin = 0;
  double w_stack_step = 0;
  // --duration: the run wrote part of the observation, listed in the
  // files as WrittenParts; only those visibilities are in them.
  bool stonewalled = false;
  // The run's own random number (storage::draw_nonce): every file of one
  // run has it, so a stale file of an earlier run with the same options
  // shows; a synthetic set's values carry it too. 0: files from before.
  std::uint32_t nonce = 0;
  // The run that made the file, for a reader and `iotest verify`: its
  // command line, its start (UTC, ISO 8601, rank 0's clock) and the host
  // that wrote this file. Empty in files from before.
  std::string command_line, started, host;
  // The visibilities' unit (UVH5 vis_units): kJanskyUnits for a sky's (a
  // source of S Jy gives amplitude S), "uncalib" for a synthetic pattern
  // (it names visibilities, it is no flux). As a reader found it: a sky's
  // file from before visibilities were in Jy says "uncalib" (or, posix,
  // nothing), and its values are 1/N^2 of these; provenance_of refuses it.
  std::string vis_units = kJanskyUnits;
};
// A run's nonce: random, never 0.
std::uint32_t draw_nonce();

// A stonewalled run's unit of written work: visit (w_stack, subgrid)'s
// visibilities in storage row chunks [row_chunk_begin, row_chunk_end).
// Degrid tasks are cut at row chunks, so a finished task is exactly one.
struct WrittenPart {
  std::int64_t w_stack = 0, subgrid = 0, row_chunk_begin = 0, row_chunk_end = 0;
  auto operator<=>(const WrittenPart&) const = default;
};
// Sorted, with ranges of one visit that touch made one.
std::vector<WrittenPart> merge_written_parts(std::vector<WrittenPart> parts);

// A chunk's CRC-32 (zlib's) over its bytes as written (time_chunk x
// freq_chunk complex doubles), stored with the output so `verify --all`
// can check every value of a sky set, whose values it cannot recompute
// cheaply. `chunk`: row_chunk * freq_chunks + freq_chunk.
struct ChunkChecksum {
  std::int64_t chunk = 0;
  std::uint32_t crc32 = 0;
};
// `crc`: the CRC-32 of the bytes before these, to go on from (zlib's
// crc32(crc, ...)): a chunk may be summed a block at a time.
std::uint32_t chunk_crc32(const void* bytes, index_t count, std::uint32_t crc = 0);
// A chunk of a shared output (phdf5) may come in parts from several
// writers, each with its own entry (the CRC-32 of its values, zeros
// elsewhere). The parts never share a value, so the chunk's bytes are the
// XOR of theirs, and CRC-32, affine over GF(2), gives the chunk's from
// theirs: crc(a ^ b) = crc(a) ^ crc(b) ^ crc(zeros). `bytes`: the chunk's.
std::uint32_t combine_part_crc32(const std::vector<std::uint32_t>& parts, index_t bytes);

// How a back-end stores a whole chunk's values (rows x channels, as
// given): as given (complex doubles), or, as MeasurementSets hold them,
// single precision and conjugated. A writer whose back-end stores them
// otherwise may be handed whole chunks already so (StoredForm chunks:
// made or converted by the pusher, where the values are in cache, with
// the CRC-32 of the stored bytes), sparing its own core the conversion.
enum class StoredForm { as_given, single_conjugated };
// A layout's "checksum_of" (ms, msv4): its CRC-32s are of a chunk's cells
// as stored (single precision, conjugated), not of iotest's values in
// double precision, as the other back-ends take them.
inline constexpr const char* kChecksumOfStoredCells = "stored cells";
// x rounded to single precision. Through a volatile float: GCC 12 at -O2
// drops a double -> float -> double round trip in code that takes and
// returns std::complex<double> (it gave back x unrounded).
inline double to_single(double x) {
  volatile float stored = static_cast<float>(x);
  return stored;
}
// `n` values as a MeasurementSet stores them: single precision, conjugated.
void to_single_conjugated(const cplx* values, index_t n, std::complex<float>* cells);

struct VisibilityLayout {
  const telescope::Observation* observation = nullptr;
  index_t baselines = 0, times = 0, channels = 0;
  index_t time_chunk = 0, freq_chunk = 0;
  std::optional<Provenance> provenance;
  // A file of a set split by frequency (FileSplit) holds every row of
  // frequency chunks [first_freq_chunk, +file_freq_chunks); 0 of them:
  // every one. Chunk keys stay the observation's.
  index_t first_freq_chunk = 0, file_freq_chunks = 0;
  // Which file of the set split by frequency it is, of how many.
  index_t file = 0, files = 1;
  index_t rows() const { return baselines * times; }
  index_t row_chunks() const { return (rows() + time_chunk - 1) / time_chunk; }
  index_t freq_chunks() const { return (channels + freq_chunk - 1) / freq_chunk; }
  index_t chunk_count() const { return row_chunks() * freq_chunks(); }
  index_t chunk_values() const { return time_chunk * freq_chunk; }
  index_t chunk_bytes() const { return chunk_values() * static_cast<index_t>(sizeof(cplx)); }
  index_t presence_words() const { return (chunk_values() + 63) / 64; }
  // The file's own frequency chunks and channels.
  index_t file_freq_chunk_end() const {
    return file_freq_chunks == 0 ? freq_chunks() : first_freq_chunk + file_freq_chunks;
  }
  index_t file_first_channel() const { return first_freq_chunk * freq_chunk; }
  index_t file_channels() const {
    return std::min(channels, file_freq_chunk_end() * freq_chunk) - file_first_channel();
  }
};

// How a run's outputs divide the observation (issue 46).
// - By row chunk (hdf5, posix, phdf5): every file has the observation's
//   shape and holds the row chunks its writer is given; HDF5 allocates
//   only the chunks written.
// - By frequency (ms): file i of N holds every row of the frequency chunks
//   f with floor(f N / F) = i, as the SDP's visibility receive writes a
//   MeasurementSet per receive process, each its own channels. No row or
//   channel is in two files; the chunks go to their file's writer.
struct FileSplit {
  enum class By { row_chunk, frequency };
  By by = By::row_chunk;
  index_t files = 1;        // in the whole run
  index_t freq_chunks = 1;  // the observation's
  bool by_frequency() const { return by == By::frequency; }
  index_t file_of(index_t freq_chunk) const { return freq_chunk * files / freq_chunks; }
  // The first frequency chunk of file i: the least f with f N >= i F.
  index_t first_freq_chunk(index_t file) const {
    return (file * freq_chunks + files - 1) / files;
  }
  // File i's layout: the observation's, with its own frequency range.
  VisibilityLayout layout_of_file(VisibilityLayout layout, index_t file) const {
    if (!by_frequency()) return layout;
    layout.first_freq_chunk = first_freq_chunk(file);
    layout.file_freq_chunks = first_freq_chunk(file + 1) - layout.first_freq_chunk;
    layout.file = file;
    layout.files = files;
    return layout;
  }
};
VisibilityLayout layout_of(const telescope::Observation& obs);
// The run the layout's output belongs to (0 without provenance).
inline std::uint32_t nonce_of(const VisibilityLayout& layout) {
  return layout.provenance ? layout.provenance->nonce : 0;
}

// A storage call's failure, for the one line: `what`, and "(disk full?)"
// where its text does not name the cause already (errno's "Disk quota
// exceeded" on a CephFS or Lustre quota, "No space left on device").
std::runtime_error storage_failure(const std::string& what);

// One storage chunk: rows [row_chunk * time_chunk, +time_chunk) of the
// baseline-time axis and channels [freq_chunk * freq_chunk_size, +freq_chunk_size).
// When the time chunk divides the time steps, a row chunk is one baseline's
// time chunk.
struct ChunkKey {
  index_t row_chunk = 0, freq_chunk = 0;
};
// The visibilities of chunk `key` inside the observation: the whole
// chunk's, less what lies past the last row or channel.
inline index_t visibilities_inside(const VisibilityLayout& layout, const ChunkKey& key) {
  return std::min(layout.time_chunk, layout.rows() - key.row_chunk * layout.time_chunk) *
         std::min(layout.freq_chunk, layout.channels - key.freq_chunk * layout.freq_chunk);
}
// Which values of a chunk a part of it carries: one bit per value,
// row-major (time_chunk x freq_chunk), layout.presence_words() words. Each
// visibility lies in one subgrid, so the parts of a chunk never share a
// bit: a shared file (phdf5) takes each part's own values, and parts
// written by different ranks cannot clobber one another.
using PresenceWord = std::uint64_t;
inline bool present(const PresenceWord* bits, index_t value) {
  return (bits[value / 64] >> (value % 64)) & 1U;
}
// Whether chunk `key` lies whole inside the observation (no row or channel
// past its edges): only such a chunk's stored cells are its whole buffer.
inline bool inside_edges(const VisibilityLayout& layout, const ChunkKey& key) {
  return (key.row_chunk + 1) * layout.time_chunk <= layout.rows() &&
         (key.freq_chunk + 1) * layout.freq_chunk <= layout.channels;
}
// Zeroes the values of chunk `key` (chunk_rows x chunk_channels,
// row-major) that lie past the observation's edges (`rows` baseline-times,
// `channels`): what readers give there, whatever a writer left.
void zero_past_edges(index_t rows, index_t channels, index_t chunk_rows, index_t chunk_channels,
                     const ChunkKey& key, cplx* values);

struct WriteStats {
  index_t chunk_writes = 0;      // write_chunk calls, rewrites included
  index_t chunks_written = 0;    // distinct chunks
  index_t chunks_rewritten = 0;  // writes to a chunk written before (read, add, write)
  index_t bytes = 0;             // chunk bytes written to storage, rewrites included
  index_t visibilities = 0;      // visibilities carried by the writes
  // Raw I/O apart from syncing and closing, as IOR and h5bench keep them:
  double seconds = 0;  // in write_chunk (and a shared output's collective rounds)
  double sync_s = 0;   // in flush and close: fsync or MPI_File_sync, closing
  // In open: creating the output and its header, synced (IOR keeps open
  // apart from transfers; a UVH5 header is 6.4 GB for SKA1-Low).
  double open_s = 0;
};

// A back-end behind iotest's writers. One instance writes one output and is
// used by one thread at a time.
class Backend {
 public:
  virtual ~Backend() = default;
  // Creates the output at `partial`, where only this run writes until its
  // claim publishes it (OutputClaim::partial(), OutputStore::partial_of),
  // with its metadata, flushed to the device.
  void open(const std::string& partial, const VisibilityLayout& layout);
  // One chunk: time_chunk x freq_chunk visibilities, row-major (rows and
  // channels past the observation's edge are ignored), zero where the
  // writer has none. A chunk written before is accumulated: read, added to,
  // written again (each visibility comes from exactly one subgrid, so the
  // sum is the merge). `visibilities` says how many it carries, `present`
  // which (nullptr: every value inside the observation).
  // `crc32`: the CRC-32 of `data`'s chunk bytes where the caller has it
  // (a whole chunk's, computed by its pusher while it was in cache), so the
  // writer does not read the chunk a second time between its writes.
  // `stored`: `data` is a whole chunk inside the edges in stored_form()
  // (its first write), and `crc32` the CRC-32 of those bytes.
  void write_chunk(const ChunkKey& key, const cplx* data, index_t visibilities,
                   const PresenceWord* present = nullptr, const std::uint32_t* crc32 = nullptr,
                   bool stored = false);
  // Pushes what is buffered to the device (fsync for files).
  void flush();
  // A stonewalled output: the parts of the observation it holds, stored
  // with it when it is completed.
  void set_written_parts(std::vector<WrittenPart> parts) { written_parts_ = std::move(parts); }
  // Completes the output, flushed, still where open() made it; its
  // OutputClaim gives it its final name.
  void complete();
  // Drops a partial output (after a failure); safe to call twice.
  virtual void abort() noexcept = 0;
  // A back-end with one output for several writers (phdf5, one per rank)
  // gets their communicator before open(). Each of them then calls open,
  // flush and complete, which are collective; it ignores a
  // communicator when each writer has an output of its own.
  virtual void share(MPI_Comm) {}
  // Whether its writers meet in collective calls as they write (collective
  // transfers): then a writer with nothing to write calls idle() every few
  // milliseconds, so its peers are not kept waiting for it.
  virtual bool meets_others() const { return false; }
  void idle();
  // What the writes' time covers: "fsync at close", "O_DIRECT", ... (the
  // report says how durable the figures are).
  virtual std::string durability() const = 0;
  // Chunk buffers (values and presence bits) it holds besides the writer's
  // queue, for the memory model.
  virtual index_t held_chunks() const { return 0; }
  // Bytes it holds besides chunk buffers, whatever the observation (s3:
  // the part being filled and those in flight), for the memory model.
  virtual index_t held_bytes() const { return 0; }
  // Bytes it holds per row chunk of the observation (ms: each row chunk's
  // first row in its table), for the memory model.
  virtual index_t row_chunk_bytes() const { return 0; }
  // The bytes it stores per visibility: less than given (16) when it
  // keeps them in less precision (ms: single precision, as MeasurementSets
  // hold them). Its WriteStats count those bytes, and its checksums are of
  // the values it stores, as readers give them back.
  virtual index_t stored_value_bytes() const { return static_cast<index_t>(sizeof(cplx)); }
  // The form of its stored values, in which it takes whole chunks too.
  virtual StoredForm stored_form() const { return StoredForm::as_given; }
  virtual std::string_view name() const = 0;
  // Where its calls (open, write_chunk, idle, flush, complete) are marked
  // as they start and end, for the rank's watchdog: a call that blocks on
  // a stalled file system ends the job (storage_progress.hpp). Before
  // open(); nullptr: not watched.
  void watch(StorageProgress* progress) { progress_ = progress; }
  const WriteStats& stats() const { return stats_; }
  const VisibilityLayout& layout() const { return layout_; }

 protected:
  virtual void do_open(const std::string& partial) = 0;
  // `accumulate`: the chunk was written before; add `data` to it. A file
  // of this writer's own may ignore `present` (the zeros elsewhere are
  // right); a shared one writes only the values present.
  virtual void do_write_chunk(const ChunkKey& key, const cplx* data, bool accumulate,
                              const PresenceWord* present) = 0;
  // A whole chunk inside the edges already in stored_form() (`cells`),
  // written once; the CRC-32 of its bytes is given_crc32(). Only back-ends
  // whose form is not as_given are handed one.
  virtual void do_write_stored(const ChunkKey& key, const void* cells);
  virtual void do_flush() = 0;
  virtual void do_close() = 0;  // complete, still where open() made it
  virtual void do_idle() {}
  const std::vector<WrittenPart>& written_parts() const { return written_parts_; }
  // Whether chunk `key` has been written (by a write_chunk that returned).
  bool written(const ChunkKey& key) const {
    return written_[static_cast<size_t>(key.row_chunk * layout_.freq_chunks() + key.freq_chunk)];
  }
  // Back-ends call this with each chunk's final bytes (after accumulating),
  // and store checksums() with the output at close. 16 B per chunk this
  // writer writes, in write order. A chunk written again replaces its entry,
  // unless `part`: a part of a shared output's chunk gets an entry of its own.
  void record_checksum(const ChunkKey& key, const void* bytes, bool part = false);
  // A checksum the back-end took itself, of the chunk as it stores it
  // (ms: its cells in single precision; its reader's chunk_checksum gives
  // the same from what it reads back).
  void record_crc32(const ChunkKey& key, std::uint32_t crc, bool part = false);
  const std::vector<ChunkChecksum>& checksums() const { return checksums_; }
  // write_chunk's `crc32` while it writes (nullptr: none, or not of the
  // bytes stored).
  const std::uint32_t* given_crc32() const { return given_crc32_; }
  // Its calls' marks (watch()), for a wait on other ranks inside a call
  // (PeersWait); nullptr: not watched.
  StorageProgress* progress() const { return progress_; }

 private:
  VisibilityLayout layout_;
  std::vector<bool> written_;  // per chunk, row_chunk * freq_chunks + freq_chunk
  WriteStats stats_;
  std::vector<WrittenPart> written_parts_;
  std::vector<ChunkChecksum> checksums_;
  const std::uint32_t* given_crc32_ = nullptr;  // write_chunk's, for its first write
  StorageProgress* progress_ = nullptr;
};

// The HDF5 library's version ("1.10.8"), for the reports.
std::string hdf5_version();

}  // namespace iotest::storage
