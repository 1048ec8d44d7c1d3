// How iotest lays out a processing set (docs/storage.md, "MSv4 processing
// sets"): what its writer and its reader share.
//
// OUT.ps.zarr holds one MSv4 per frequency range (FileSplit, as ms), named
// "<stem>_<file>" (vis.ps.zarr: vis_0, vis_1, ...), each every (time,
// baseline) of its own channels, written by one writer. VISIBILITY is
// complex64 over (time, baseline_id, frequency, polarization), single
// precision and conjugated as MeasurementSets hold it (StoredForm), one
// polarization (XX). Its zarr chunk is an iotest chunk:
// - a time chunk that divides the time steps: (time_chunk, 1, freq_chunk,
//   1), the chunk of one baseline's time range, in iotest's own order;
// - a time chunk of whole baselines' times (a multiple of the steps):
//   (times, time_chunk / times, freq_chunk, 1), its rows reordered time
//   first;
// any other time chunk is refused (check_time_chunk). FLAG (bool, fill
// false) and WEIGHT (float32, fill 1) share that grid; only the FLAG
// chunks that flag something are written, and no WEIGHT chunk. UVW
// (float64, (time, baseline_id, uvw_label)) is written whole at open, in
// chunks of about kUvwChunkBytes.
//
// iotest's own bookkeeping, which xradio's schema has no place for, is
// beside the zarr nodes: the MSv4 group's "iotest" attribute (the axes,
// chunks and provenance, as ms keeps them in a keyword) and its key
// "iotest/chunks" (each chunk's CRC-32, and a stonewalled run's written
// parts), which no zarr reader lists once the root's consolidated metadata
// is there.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "iotest/common/array.hpp"
#include "iotest/storage/backend.hpp"

namespace iotest::storage::msv4 {

// The schema xradio 1.3 checks (xradio.measurement_set.schema).
inline constexpr const char* kSchemaVersion = "4.0.1";
inline constexpr std::int64_t kUvwChunkBytes = std::int64_t{4} << 20;
// The root group's metadata: the last key written, whose presence makes
// the processing set (zarr format 3).
inline constexpr const char* kRootKey = "zarr.json";
// An MSv4's bookkeeping key (relative to its group): little-endian int64
// words, a header [kChunksMagic, checksums, parts] then (chunk, crc32)
// pairs, then (w_stack, subgrid, row_chunk_begin, row_chunk_end) quads.
inline constexpr const char* kChunksKey = "iotest/chunks";
inline constexpr std::int64_t kChunksMagic = 0x3476534d74736f69;  // "iotstMSv4"
// The MSv4 group attribute holding iotest's layout JSON.
inline constexpr const char* kLayoutAttribute = "iotest";

// The stem of a processing set's name: "vis" for ".../vis.ps.zarr" (or
// "vis.zarr", "vis"); its MSv4s are "<stem>_<file>".
std::string set_stem(const std::string& path);
std::string msv4_name(const std::string& stem, index_t file);

// The zarr chunk grid of one MSv4's VISIBILITY (and FLAG, WEIGHT).
struct Msv4Grid {
  index_t times = 0, baselines = 0, channels = 0;  // the MSv4's (its own channels)
  index_t first_freq_chunk = 0;                    // the observation's chunk of its channel 0
  index_t chunk_times = 0, chunk_baselines = 0, chunk_channels = 0;
  // iotest's time chunk (rows a row chunk holds).
  index_t time_chunk = 0;

  // Whether a chunk's rows must be reordered (baseline-major in iotest,
  // time-major in zarr): chunk_baselines > 1.
  bool reorders() const { return chunk_baselines > 1; }
  index_t chunk_values() const { return chunk_times * chunk_baselines * chunk_channels; }
  // The zarr chunk indices (time, baseline, frequency, polarization) of
  // iotest chunk `key` (the observation's frequency chunk).
  std::array<index_t, 4> chunk_of(const ChunkKey& key) const;
  // And back: the iotest chunk a zarr chunk (time, baseline, frequency) is.
  ChunkKey key_of(index_t time_chunk_index, index_t baseline_chunk_index,
                  index_t freq_chunk_index) const;
};
// The grid for file `layout` (VisibilityLayout, its file's frequency
// range): throws std::logic_error for a time chunk check_time_chunk refuses.
Msv4Grid grid_of(const VisibilityLayout& layout);

// Empty where msv4 can store chunks of `time_chunk` rows of an observation
// of `times` steps, else why not (for the UsageError naming --time).
std::string time_chunk_problem(index_t times, index_t time_chunk);

// "ARRAY/c/i/j/k/l": a chunk's key (zarr's default key encoding, '/').
std::string chunk_key(const std::string& array, const std::array<index_t, 4>& index);

// iotest's rows are baseline-major ([baseline][time][channel] within a
// chunk); zarr's chunk is [time][baseline][channel]. `from` and `to` hold
// grid.chunk_values() values of `bytes_per_value` bytes each.
void reorder_rows(const Msv4Grid& grid, const void* from, void* to, std::size_t bytes_per_value,
                  bool to_zarr);

// TIME in an MSv4: Unix seconds (UTC); the MS's TIME is MJD seconds.
inline double unix_from_mjd_seconds(double mjd_s) { return mjd_s - 40587.0 * 86400.0; }

}  // namespace iotest::storage::msv4
