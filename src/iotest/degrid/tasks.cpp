#include "iotest/degrid/tasks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <tuple>

namespace iotest::degrid {

void sort_for_storage(std::vector<binning::VisRun>& runs) {
  std::sort(runs.begin(), runs.end(), [](const binning::VisRun& a, const binning::VisRun& b) {
    return std::tie(a.baseline, a.time, a.chan_begin) < std::tie(b.baseline, b.time, b.chan_begin);
  });
}

void runs_to_chunks(index_t times, const binning::VisRun* begin, const binning::VisRun* end,
                    const cplx* vis, chunks::ChunkAssembler& chunks,
                    const chunks::ChunkAssembler::Emit& emit) {
  for (const auto* run = begin; run != end; ++run) {
    chunks.add(index_t{run->baseline} * times + run->time, run->chan_begin, run->count(), vis,
               emit);
    vis += run->count();
  }
  chunks.flush(emit);
}

void gather_runs(chunks::ChunkGatherer& gatherer, index_t times, const binning::VisRun* begin,
                 const binning::VisRun* end, cplx* vis) {
  for (const auto* run = begin; run != end; vis += run->count(), ++run)
    gatherer.gather(index_t{run->baseline} * times + run->time, run->chan_begin, run->count(), vis);
  gatherer.clear();
}

void degrid_to_chunks(const Degridder& d, const binning::VisRun* begin, const binning::VisRun* end,
                      index_t off0, index_t off1, const Degridder::Workspace& ws,
                      std::vector<cplx>& vis, chunks::ChunkAssembler& chunks,
                      const chunks::ChunkAssembler::Emit& emit) {
  vis.clear();
  d.degrid(begin, end, off0, off1, ws, vis);
  runs_to_chunks(d.observation().time.steps, begin, end, vis.data(), chunks, emit);
}

namespace {

// A row's first `n` values of the pattern: real part `re` throughout,
// imaginary part `im0` + j, integers (exact). A loop the compiler makes
// into vector stores.
void pattern_row(cplx* row, double re, double im0, index_t n) {
  auto* out = reinterpret_cast<double*>(row);
  for (index_t j = 0; j < n; ++j) {
    out[2 * j] = re;
    out[2 * j + 1] = im0 + static_cast<double>(j);
  }
}
// The same as a MeasurementSet stores it: single precision, conjugated
// (value for value storage::to_single_conjugated's of the above).
void pattern_row(std::complex<float>* row, double re, double im0, index_t n) {
  auto* out = reinterpret_cast<float*>(row);
  const auto real = static_cast<float>(re);
  for (index_t j = 0; j < n; ++j) {
    out[2 * j] = real;
    out[2 * j + 1] = static_cast<float>(-(im0 + static_cast<double>(j)));
  }
}

// A part of a chunk: the values of a row (from the chunk's value `first`)
// whose presence bit is clear are zero. A word of bits at a time: parts
// are a quarter of the chunks in the walk's order (a chunk split between
// subgrids), and a bit at a time cost a third of making them.
template <typename Value>
void clear_absent(Value* row, const storage::PresenceWord* present, index_t first, index_t n) {
  for (index_t j = 0; j < n;) {
    const index_t value = first + j, bit = value % 64;
    const index_t span = std::min<index_t>(n - j, 64 - bit);  // this word's values in the row
    const storage::PresenceWord all =
        span == 64 ? ~storage::PresenceWord{0} : (storage::PresenceWord{1} << span) - 1;
    const storage::PresenceWord bits = (present[value / 64] >> bit) & all;
    if (bits == 0) {
      std::fill(row + j, row + j + span, Value{});
    } else if (bits != all) {
      for (index_t k = 0; k < span; ++k)
        if (!((bits >> k) & 1U)) row[j + k] = Value{};
    }
    j += span;
  }
}

// Rows made before they are checksummed: well inside a core's L1 cache.
constexpr index_t kChecksumBlockBytes = index_t{16} << 10;

// synthesize_chunk in one form (Value: its complex type).
template <typename Value>
std::uint32_t make_pattern(const storage::VisibilityLayout& layout, const storage::ChunkKey& key,
                           std::uint32_t nonce, const storage::PresenceWord* present,
                           Value* values) {
  const index_t rows = layout.time_chunk, chans = layout.freq_chunk;
  const index_t rows_inside = std::min(rows, layout.rows() - key.row_chunk * rows);
  const index_t chans_inside = std::min(chans, layout.channels - key.freq_chunk * chans);
  const index_t row_bytes = chans * static_cast<index_t>(sizeof(Value));
  std::uint32_t crc = 0;
  index_t unsummed = 0;  // the first row not yet in `crc`
  for (index_t r = 0; r < rows; ++r) {
    Value* row = values + r * chans;
    index_t made = 0;
    if (r < rows_inside) {
      const index_t at = key.row_chunk * rows + r;  // baseline * times + time
      const cplx first =
          synthetic_visibility(at / layout.times, at % layout.times, key.freq_chunk * chans, nonce);
      pattern_row(row, first.real(), first.imag(), chans_inside);
      if (present) clear_absent(row, present, r * chans, chans_inside);
      made = chans_inside;
    }
    std::fill(row + made, row + chans, Value{});  // past the observation's edges
    if ((r + 1 - unsummed) * row_bytes >= kChecksumBlockBytes || r + 1 == rows) {
      crc = storage::chunk_crc32(values + unsummed * chans, (r + 1 - unsummed) * row_bytes, crc);
      unsummed = r + 1;
    }
  }
  return crc;
}

}  // namespace

std::uint32_t synthesize_chunk(const storage::VisibilityLayout& layout, const storage::ChunkKey& key,
                               std::uint32_t nonce, const storage::PresenceWord* present,
                               void* values, storage::StoredForm form) {
  if (form == storage::StoredForm::single_conjugated)
    return make_pattern(layout, key, nonce, present, static_cast<std::complex<float>*>(values));
  return make_pattern(layout, key, nonce, present, static_cast<cplx*>(values));
}

index_t synthesize_to_chunks(std::uint32_t nonce, const binning::VisRun* begin,
                             const binning::VisRun* end, chunks::ChunkCover& cover,
                             const MadeChunkEmit& emit) {
  const auto& layout = cover.layout();
  const chunks::ChunkCover::Emit covered = [&](const storage::ChunkKey& key, index_t n,
                                               const storage::PresenceWord* present) {
    emit(key, n, present, [&](void* values, storage::StoredForm form) {
      return synthesize_chunk(layout, key, nonce, present, values, form);
    });
  };
  index_t visibilities = 0;
  for (const auto* run = begin; run != end; ++run) {
    cover.add(index_t{run->baseline} * layout.times + run->time, run->chan_begin, run->count(),
              covered);
    visibilities += run->count();
  }
  cover.flush(covered);
  return visibilities;
}

void PatternCheck::add(const storage::Reader& file, const std::string& name,
                       const storage::ChunkKey& key, const cplx* values, std::uint32_t nonce) {
  const index_t rows = file.chunk_rows(), chans = file.chunk_channels(), times = file.times();
  // Inside the observation only: the writer zeroes what lies past its edges.
  for (index_t r = 0; r < rows; ++r) {
    const index_t row = key.row_chunk * rows + r;
    if (row >= file.baselines() * times) break;
    for (index_t c = 0; c < chans && key.freq_chunk * chans + c < file.channels(); ++c) {
      const index_t chan = key.freq_chunk * chans + c;
      const cplx got = values[r * chans + c];
      ++checked;
      if (got == cplx{}) continue;  // held by another file (the pattern is never zero)
      if (got == file.as_stored(synthetic_visibility(row / times, row % times, chan, nonce))) {
        ++right;
      } else if (wrong++ == 0) {
        first_wrong =
            fmt::format("{} baseline {} time {} channel {}", name, row / times, row % times, chan);
      }
    }
  }
}

namespace {

// Calls f(k, phase) for the channels k of `run` (0 for its first), phase =
// exp(sign 2 pi i f_k / c (u l + v m + w (n - 1))) for the pixel at (l, m):
// linear in frequency, so stepped across channels and recomputed every 256
// to keep rounding at ~1e-14.
template <class F>
void run_phases(const Degridder& d, const binning::VisRun& run, double l, double m, double sign,
                F&& f) {
  const auto& freq = d.observation().freq;
  const auto b = d.baseline_uvw(run.baseline, run.time);
  const double n = std::sqrt(1 - l * l - m * m);
  const double turns_per_hz = sign * (b.u * l + b.v * m + b.w * (n - 1)) / telescope::kSpeedOfLight;
  const cplx step = std::polar(1.0, kTwoPi * turns_per_hz * freq.step());
  cplx phase;
  for (index_t k = 0; k < run.count(); ++k, phase *= step) {
    if (k % 256 == 0) phase = std::polar(1.0, kTwoPi * turns_per_hz * freq.at(run.chan_begin + k));
    f(k, phase);
  }
}

}  // namespace

void predict_direct(const Degridder& d, const std::vector<sky::PointSource>& sources,
                    const binning::VisRun* begin, const binning::VisRun* end,
                    std::vector<cplx>& vis) {
  vis.clear();
  const double pixel = d.geometry().pixel_lm;
  for (const auto* run = begin; run != end; ++run) {
    const size_t first = vis.size();
    vis.resize(first + static_cast<size_t>(run->count()));
    // In Jy, as sky::direct_visibility.
    for (const auto& s : sources)
      run_phases(d, *run, static_cast<double>(s.y0) * pixel, static_cast<double>(s.y1) * pixel, 1,
                 [&](index_t k, cplx phase) {
                   vis[first + static_cast<size_t>(k)] += sky::kSourceFluxJy * phase;
                 });
  }
}

void DirtyPixels::add(const Degridder& d, const binning::VisRun* begin, const binning::VisRun* end,
                      const cplx* vis) {
  const double pixel = d.geometry().pixel_lm;
  for (const auto* run = begin; run != end; vis += run->count(), ++run)
    for (size_t i = 0; i < pixels.size(); ++i) {
      cplx sum = 0;
      run_phases(d, *run, static_cast<double>(pixels[i].y0) * pixel,
                 static_cast<double>(pixels[i].y1) * pixel, -1,
                 [&](index_t k, cplx phase) { sum += vis[k] * phase; });
      sums[i] += sum;
    }
}

void DirtyPixels::merge(const DirtyPixels& o) {
  for (size_t i = 0; i < sums.size(); ++i) sums[i] += o.sums[i];
}

void DirtyPixels::normalise(index_t weight_sum) {
  const double scale = dirty_image_scale(weight_sum);
  for (auto& s : sums) s *= scale;
}

std::vector<index_t> pick_samples(const telescope::Observation& obs, index_t count,
                                  std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  const index_t total = obs.visibility_count();
  std::vector<index_t> keys;
  for (index_t i = 0; i < count; ++i)
    keys.push_back(static_cast<index_t>(rng() % static_cast<std::uint64_t>(total)));
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

index_t check_samples(const Degridder& d, const std::vector<sky::PointSource>& sources,
                      const std::vector<index_t>& samples, const binning::VisRun* begin,
                      const binning::VisRun* end, const cplx* vis, RelativeError& error) {
  const index_t nt = d.observation().time.steps, nch = d.observation().freq.steps;
  index_t checked = 0;
  size_t at = 0;
  for (const auto* run = begin; run != end; ++run) {
    const index_t base = (index_t{run->baseline} * nt + run->time) * nch;
    auto it = std::lower_bound(samples.begin(), samples.end(), base + run->chan_begin);
    for (; it != samples.end() && *it < base + run->chan_end; ++it) {
      const index_t chan = *it - base;
      const cplx want = d.direct(sources, run->baseline, run->time, chan);
      const cplx got = vis[at + static_cast<size_t>(chan - run->chan_begin)];
      error.add(CView2D(&got, 1, 1), CView2D(&want, 1, 1));
      ++checked;
    }
    at += static_cast<size_t>(run->count());
  }
  return checked;
}

}  // namespace iotest::degrid
