// Degrid work in tasks, shared by `iotest degrid` and the streamers: a
// subgrid's runs in storage order, cut into tasks of whole row chunks (a
// baseline's time chunk), each degridded into whole storage chunks, plus the
// check of sampled visibilities against the direct transform.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/chunks/chunk_assembler.hpp"
#include "iotest/chunks/chunk_gatherer.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/storage/reader.hpp"

namespace iotest::degrid {

// Sorts runs by (baseline, time, channel): the order of the visibility files.
void sort_for_storage(std::vector<binning::VisRun>& runs);

// A task (binning::cut_at_row_chunks) stops taking row chunks once it
// holds this many visibilities
// (64 MiB): its buffer then stays small whatever the channel count (256
// row chunks of 64 dumps x 65,536 channels would be 16 GiB).
inline constexpr index_t kTaskVisibilities = index_t{1} << 22;

// Values `vis` of runs [begin, end), run after run (as Degridder::degrid
// leaves them), into whole chunks for `emit`; `times`: the observation's
// time steps. The GPU path's visibilities reach storage this way.
void runs_to_chunks(index_t times, const binning::VisRun* begin, const binning::VisRun* end,
                    const cplx* vis, chunks::ChunkAssembler& chunks,
                    const chunks::ChunkAssembler::Emit& emit);

// runs_to_chunks' inverse: the stored values of runs [begin, end), run
// after run, into `vis` (as many as the runs hold), from the files behind
// `gatherer`, whose chunk cache is then cleared.
void gather_runs(chunks::ChunkGatherer& gatherer, index_t times, const binning::VisRun* begin,
                 const binning::VisRun* end, cplx* vis);

// Degrids runs [begin, end) from the tower in `ws` into `vis` (cleared
// first) and hands whole chunks to `emit`.
void degrid_to_chunks(const Degridder& d, const binning::VisRun* begin, const binning::VisRun* end,
                      index_t off0, index_t off1, const Degridder::Workspace& ws,
                      std::vector<cplx>& vis, chunks::ChunkAssembler& chunks,
                      const chunks::ChunkAssembler::Emit& emit);

// The storage-only mode (--synthetic-vis): a cheap value that names its
// visibility and its run, (nonce * 2^20 + baseline + 1) + i (time * 2^20 +
// channel). Integers below 2^52, so exact in a double and through the
// accumulate-on-rewrite path (each visibility is written once, zeros
// elsewhere), and never zero, so a missing visibility shows. Unique while
// baselines and channels < 2^20; a file of another run (another nonce)
// differs in every value.
inline cplx synthetic_visibility(index_t baseline, index_t time, index_t channel,
                                 std::uint32_t nonce) {
  constexpr index_t kShift = index_t{1} << 20;
  return {static_cast<double>(static_cast<index_t>(nonce) * kShift + baseline + 1),
          static_cast<double>(time * kShift + channel)};
}

// Every value of chunks read back from a synthetic set against the pattern
// (`iotest read --check`, `iotest verify --all`). A chunk split over
// writers is in each of their files, zero where another holds the value:
// each non-zero value must be the pattern's, and over a whole set `right`
// must equal the observation's visibilities (each there exactly once).
struct PatternCheck {
  index_t checked = 0, right = 0, wrong = 0;
  std::string first_wrong;  // "FILE baseline B time T channel C"
  // `values`: chunk `key` of `file` (named `name`), as read_chunk gives it;
  // `nonce`: the set's run (a file of another run is wrong throughout).
  void add(const storage::Reader& file, const std::string& name, const storage::ChunkKey& key,
           const cplx* values, std::uint32_t nonce);
};

// Chunk `key` of the synthetic pattern (synthetic_visibility with
// `nonce`), made in place: layout.chunk_values() values, row-major, zero
// past the observation's edges and, given `present`, wherever its bit is
// clear. Each row is a constant real part and a ramp in channel, made a
// vector at a time; the CRC-32 of the chunk's bytes (chunk_crc32's) is
// taken a few rows at a time as they are made, while they are in cache
// (the writer then never reads them again). Returns it. `form`: the values
// as given, or as a MeasurementSet stores them (storage::to_single_conjugated's).
std::uint32_t synthesize_chunk(const storage::VisibilityLayout& layout, const storage::ChunkKey& key,
                               std::uint32_t nonce, const storage::PresenceWord* present,
                               void* values,
                               storage::StoredForm form = storage::StoredForm::as_given);

// Receives a covered chunk: its key, how many visibilities it carries,
// which (nullptr: all, the chunk is whole), and how to make it where it goes.
using MadeChunkEmit = std::function<void(const storage::ChunkKey&, index_t,
                                         const storage::PresenceWord*, const chunks::MakeChunk&)>;

// degrid_to_chunks' twin for the storage-only mode: the same runs in the
// same order give the same chunks to `emit`, with the pattern in place of
// degridded values. Only which visibilities the runs cover is tracked;
// each chunk is made once, whole, where `emit` puts it (the writer's
// queue): no values per run, no copies. Returns the runs' visibilities.
index_t synthesize_to_chunks(std::uint32_t nonce, const binning::VisRun* begin,
                             const binning::VisRun* end, chunks::ChunkCover& cover,
                             const MadeChunkEmit& emit);

// The imaging direction without files: the sky's visibilities by direct
// Fourier transform (as Degridder::direct), run after run into `vis`
// (cleared first).
void predict_direct(const Degridder& d, const std::vector<sky::PointSource>& sources,
                    const binning::VisRun* begin, const binning::VisRun* end,
                    std::vector<cplx>& vis);

// The dirty image's scale, in Jy/beam as imagers make it with natural
// weighting: divided by the sum of the weights. Every weight is 1 here, so
// the sum is the visibilities gridded over the whole run; a source of S Jy
// then reads S at its pixel (after the grid correction). Applied where the
// image is finished, not per facet or stack: a sum over the whole run.
inline double dirty_image_scale(index_t weight_sum) {
  return weight_sum > 0 ? 1.0 / static_cast<double>(weight_sum) : 0.0;
}

// Sampled pixels of the dirty image by the direct adjoint transform of the
// same visibilities, I(l, m) = sum V exp(-2 pi i (u l + v m + w (n - 1))),
// what gridding is checked against. Each thread adds its visibilities to
// its own copy; the copies are then merged, and normalised as the image is.
struct DirtyPixels {
  std::vector<sky::PointSource> pixels;  // image pixels (y0, y1), centred
  std::vector<cplx> sums;                // one per pixel
  DirtyPixels() = default;
  explicit DirtyPixels(std::vector<sky::PointSource> at)
      : pixels(std::move(at)), sums(pixels.size()) {}
  // Visibilities `vis` of runs [begin, end), run after run.
  void add(const Degridder& d, const binning::VisRun* begin, const binning::VisRun* end,
           const cplx* vis);
  void merge(const DirtyPixels& o);
  // The sums times dirty_image_scale(weight_sum), as the image.
  void normalise(index_t weight_sum);
};

// Random visibilities to check, as sorted linear indices
// (baseline * times + time) * channels + channel.
std::vector<index_t> pick_samples(const telescope::Observation& obs, index_t count,
                                  std::uint64_t seed);

// Adds to `error` the sampled visibilities among runs [begin, end) (whose
// values are `vis`, as degrid_to_chunks left them). Returns how many.
index_t check_samples(const Degridder& d, const std::vector<sky::PointSource>& sources,
                      const std::vector<index_t>& samples, const binning::VisRun* begin,
                      const binning::VisRun* end, const cplx* vis, RelativeError& error);

}  // namespace iotest::degrid
