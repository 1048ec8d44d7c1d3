// Storage back-ends for visibilities, behind one small interface (as IOR's
// back-ends): `null` (a dry run: counts, writes nothing) and `hdf5` (one
// UVH5 file per writer, readable by pyuvdata). A back-end writes to a
// temporary name and renames it on close, so a run that fails leaves no file
// that looks complete.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::storage {

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
};

struct VisibilityLayout {
  const telescope::Observation* observation = nullptr;
  index_t baselines = 0, times = 0, channels = 0;
  index_t time_chunk = 0, freq_chunk = 0;
  std::optional<Provenance> provenance;
};
VisibilityLayout layout_of(const telescope::Observation& obs);

struct WriteStats {
  index_t writes = 0;          // write calls
  index_t bytes = 0;           // visibility bytes handed to the back-end
  index_t chunks_touched = 0;  // distinct storage chunks written
  double seconds = 0;          // in write, flush and close
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Creates the output (under a temporary name until close()).
  virtual void open(const std::string& path, const VisibilityLayout& layout) = 0;
  // Visibilities of one baseline, times [t0, t0 + nt) and channels
  // [c0, c0 + nc), time-major.
  virtual void write(index_t baseline, index_t t0, index_t nt, index_t c0, index_t nc,
                     const cplx* data) = 0;
  // Completes the output and gives it its final name.
  virtual void close() = 0;
  // Drops a partial output (after a failure); safe to call twice.
  virtual void abort() noexcept = 0;
  virtual std::string_view name() const = 0;
  const WriteStats& stats() const { return stats_; }

 protected:
  // Counts one write of the block (baseline, times, channels) of `layout`.
  void account(const VisibilityLayout& layout, index_t baseline, index_t t0, index_t nt, index_t c0,
               index_t nc);
  WriteStats stats_;

 private:
  std::unordered_set<index_t> chunks_;
};

// "null" or "hdf5"; throws UsageError("--backend") for others.
std::unique_ptr<Backend> make_backend(std::string_view name);

}  // namespace iotest::storage
