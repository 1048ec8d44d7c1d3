// How iotest lays out a processing set (docs/storage.md, "MSv4 processing
// sets"): what its writer and its reader share.
//
// OUT.ps.zarr holds one MSv4 per frequency range (FileSplit, as ms), named
// "<stem>_<file>" (vis.ps.zarr: vis_0, vis_1, ...), each every (time,
// baseline) of its own channels, written by one writer. VISIBILITY is
// complex64 over (time, baseline_id, frequency, polarization), single
// precision and conjugated as MeasurementSets hold it (StoredForm), one
// polarization (XX). Its zarr chunk is an iotest chunk, (time_chunk, 1,
// freq_chunk, 1): one baseline's time range, in iotest's own order (rows
// time-major within a baseline, channels fastest), so a time chunk must
// divide the time steps (time_chunk_problem; --time takes no chunk
// longer than the steps). FLAG (bool, fill
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
#include <string_view>
#include <vector>

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
  index_t chunk_times = 0, chunk_channels = 0;     // a chunk holds one baseline

  index_t chunk_values() const { return chunk_times * chunk_channels; }
  // The zarr chunk indices (time, baseline, frequency, polarization) of
  // iotest chunk `key` (the observation's frequency chunk).
  std::array<index_t, 4> chunk_of(const ChunkKey& key) const;
  // And back: the iotest chunk a zarr chunk (time, baseline, frequency) is.
  ChunkKey key_of(index_t time_chunk_index, index_t baseline, index_t freq_chunk_index) const;
};
// The grid for file `layout` (VisibilityLayout, its file's frequency
// range): throws std::logic_error for a time chunk time_chunk_problem refuses.
Msv4Grid grid_of(const VisibilityLayout& layout);

// Empty where msv4 can store chunks of `time_chunk` rows of an observation
// of `times` steps, else why not (for the UsageError naming --time).
std::string time_chunk_problem(index_t times, index_t time_chunk);

// "ARRAY/c.i.j.k.l": a chunk's key (zarr's default key encoding with '.'
// as the separator): a folder store keeps an array's chunks in one folder,
// not a folder per chunk (with '/', 2 folders a chunk to make and sync).
inline constexpr char kChunkSeparator = '.';
std::string chunk_key(const std::string& array, const std::vector<index_t>& index);
std::string chunk_key(const std::string& array, const std::array<index_t, 4>& index);
// The indices of chunk key `name` (its key after "ARRAY/": "c.i.j.k.l");
// false for anything else.
bool parse_chunk_key(std::string_view name, std::array<index_t, 4>& index);

// TIME in an MSv4: Unix seconds (UTC); the MS's TIME is MJD seconds.
inline double unix_from_mjd_seconds(double mjd_s) {
  return mjd_s - 40587.0 * 86400.0;
}

}  // namespace iotest::storage::msv4
