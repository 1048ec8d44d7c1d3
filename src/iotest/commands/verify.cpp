#include "iotest/commands/verify.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <random>

#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/config/rec_set.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/storage/uvh5_reader.hpp"
#include "iotest/telescope/geodesy.hpp"

namespace iotest::commands {

report::Report verify(const VerifyOptions& o) {
  if (o.files.empty()) throw UsageError("FILE", "expected at least one visibility file");
  if (o.samples < 1) throw UsageError("--samples", "expected at least 1 sample per file");
  if (!(o.tolerance > 0)) throw UsageError("--tolerance", "expected a relative RMSE > 0");
  report::Report r;
  r.mode = "verify";
  report::Verification v;
  v.files = o.files;
  v.tolerance = o.tolerance;
  v.passed = true;
  ErrorTally tally;
  index_t samples = 0;
  for (const auto& path : o.files) {
    const storage::Uvh5Reader file(path);
    const index_t expected = file.chunks_expected(), present = file.chunks_present();
    v.chunks_expected += expected;
    v.chunks_present += present;
    if (present < expected && v.passed) {
      v.passed = false;
      v.reason = fmt::format("{}: {} of {} chunks missing", path, expected - present, expected);
    }
    if (!file.provenance())
      throw UsageError(path, "has no iotest provenance (rec-set, sky): not written by iotest");
    const auto& pv = *file.provenance();
    const auto p = config::resolve_rec_set(pv.rec_set);
    const auto sources = sky::random_sources(o.source_count.value_or(pv.source_count), p.used_size,
                                             o.seed.value_or(pv.seed));
    // One visibility in each of up to `samples` chunks, chosen at random.
    const index_t rows = file.baselines() * file.times();
    const index_t row_chunks = (rows + file.chunk_rows() - 1) / file.chunk_rows();
    const index_t chan_chunks =
        (file.channels() + file.chunk_channels() - 1) / file.chunk_channels();
    std::mt19937_64 rng(0x5eed);
    RelativeError e;
    const index_t chunks = row_chunks * chan_chunks;
    for (index_t i = 0; i < std::min(o.samples, chunks); ++i) {
      const index_t c = chunks <= o.samples
                            ? i
                            : static_cast<index_t>(rng() % static_cast<std::uint64_t>(chunks));
      const index_t row =
          std::min(rows - 1,
                   c / chan_chunks * file.chunk_rows() +
                       static_cast<index_t>(rng() % static_cast<std::uint64_t>(file.chunk_rows())));
      const index_t chan = std::min(
          file.channels() - 1,
          c % chan_chunks * file.chunk_channels() +
              static_cast<index_t>(rng() % static_cast<std::uint64_t>(file.chunk_channels())));
      if (!file.chunk_present(row, chan)) continue;  // counted as missing above
      const double scale = file.frequencies()[static_cast<size_t>(chan)] / telescope::kSpeedOfLight;
      const double* b = file.uvw().data() + 3 * row;
      const cplx want = sky::direct_visibility(sources, pv.pixel_lm, p.N, scale * b[0],
                                               scale * b[1], scale * b[2]);
      const cplx got = file.visibility(row, chan);
      e.add(CView2D(&got, 1, 1), CView2D(&want, 1, 1));
      ++samples;
    }
    tally.add(e);
    if (!(e.value() <= o.tolerance) && v.passed) {
      v.passed = false;
      v.reason = fmt::format(
          "{}: sampled visibilities differ from the direct transform "
          "(relative RMSE {:.2e} > {:.1e})",
          path, e.value(), o.tolerance);
    }
  }
  report::Accuracy a;
  a.vis_rmse = tally.pooled.value();
  a.vis_rmse_max = tally.worst;
  a.vis_samples = samples;
  r.accuracy = a;
  r.verification = v;
  return r;
}

}  // namespace iotest::commands
