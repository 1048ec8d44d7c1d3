#include "iotest/commands/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <set>

#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/config/rec_set.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/storage/uvh5_reader.hpp"
#include "iotest/telescope/geodesy.hpp"

namespace iotest::commands {
namespace {

const storage::Provenance& provenance_of(const storage::Uvh5Reader& file, const std::string& path) {
  if (!file.provenance())
    throw UsageError(path, "has no iotest provenance (rec-set, sky): not written by iotest");
  return *file.provenance();
}

// Files of one output set share the observation's shape and the sky.
void check_same_set(const storage::Uvh5Reader& file, const std::string& path,
                    const storage::Uvh5Reader& first, const std::string& first_path) {
  const auto mismatch = [&](const char* what, const auto& got, const auto& want) {
    if (got != want)
      throw UsageError(path, fmt::format("{} {} does not match {} ({} there): not one output set",
                                         what, got, first_path, want));
  };
  mismatch("Nbls", file.baselines(), first.baselines());
  mismatch("Ntimes", file.times(), first.times());
  mismatch("Nfreqs", file.channels(), first.channels());
  mismatch("chunk rows", file.chunk_rows(), first.chunk_rows());
  mismatch("chunk channels", file.chunk_channels(), first.chunk_channels());
  if (file.frequencies() != first.frequencies())
    throw UsageError(path,
                     fmt::format("freq_array does not match {}: not one output set", first_path));
  const auto& a = provenance_of(file, path);
  const auto& b = *first.provenance();
  const auto kind = [](const storage::Provenance& pv) {
    return pv.synthetic ? "synthetic (--synthetic-vis)" : "a sky's";
  };
  if (a.synthetic != b.synthetic)
    throw UsageError(path, fmt::format("is {} and {} is {}: synthetic and sky files do not mix",
                                       kind(a), first_path, kind(b)));
  mismatch("iotest_rec_set", a.rec_set, b.rec_set);
  mismatch("iotest_pixel_lm", a.pixel_lm, b.pixel_lm);
  mismatch("iotest_source_count", a.source_count, b.source_count);
  mismatch("iotest_seed", a.seed, b.seed);
}

struct Sample {
  index_t row = 0, chan = 0, chunk = 0;
  cplx sum{0, 0};      // over the files holding the chunk
  bool found = false;  // in at least one file
};

// What the sampled visibility should be: the direct transform of the set's
// sky, or for a synthetic set the pattern that names it.
using Reference = std::function<cplx(const Sample&)>;

Reference sky_reference(const storage::Uvh5Reader& first, const storage::Provenance& pv,
                        const VerifyOptions& o) {
  const auto p = config::resolve_rec_set(pv.rec_set);
  auto sources = sky::random_sources(o.source_count.value_or(pv.source_count), p.used_size,
                                     o.seed.value_or(pv.seed));
  return [&first, pv, N = p.N, sources = std::move(sources)](const Sample& s) {
    const double scale =
        first.frequencies()[static_cast<size_t>(s.chan)] / telescope::kSpeedOfLight;
    const double* b = first.uvw().data() + 3 * s.row;
    return sky::direct_visibility(sources, pv.pixel_lm, N, scale * b[0], scale * b[1],
                                  scale * b[2]);
  };
}

Reference pattern_reference(index_t times) {
  return [times](const Sample& s) {
    return degrid::synthetic_visibility(s.row / times, s.row % times, s.chan);
  };
}

}  // namespace

report::Report verify(const VerifyOptions& o) {
  if (o.files.empty()) throw UsageError("FILE", "expected at least one visibility file");
  if (o.samples < 1) throw UsageError("--samples", "expected at least 1 sample");
  if (!(o.tolerance > 0)) throw UsageError("--tolerance", "expected a relative RMSE > 0");
  report::Report r;
  r.mode = "verify";
  report::Verification v;
  v.files = o.files;
  v.tolerance = o.tolerance;
  v.passed = true;
  // The set's name in reasons: the file, or the first and how many.
  const std::string set_name =
      o.files.size() == 1 ? o.files[0]
                          : fmt::format("{} and {} more files", o.files[0], o.files.size() - 1);

  // The first file gives the axes, (u, v, w) and the sky for the whole set.
  const storage::Uvh5Reader first(o.files[0]);
  const auto& pv = provenance_of(first, o.files[0]);
  const index_t rows = first.baselines() * first.times();
  const index_t chan_chunks = first.channel_chunks();
  const index_t chunks = first.chunks_expected();

  // One visibility in each of up to `samples` chunks, chosen at random.
  std::vector<Sample> samples;
  std::mt19937_64 rng(0x5eed);
  for (index_t i = 0; i < std::min(o.samples, chunks); ++i) {
    const index_t c =
        chunks <= o.samples ? i : static_cast<index_t>(rng() % static_cast<std::uint64_t>(chunks));
    const index_t row = std::min(
        rows - 1, c / chan_chunks * first.chunk_rows() +
                      static_cast<index_t>(rng() % static_cast<std::uint64_t>(first.chunk_rows())));
    const index_t chan = std::min(
        first.channels() - 1,
        c % chan_chunks * first.chunk_channels() +
            static_cast<index_t>(rng() % static_cast<std::uint64_t>(first.chunk_channels())));
    samples.push_back({row, chan, c});
  }

  // Every file: the chunks it holds, and the sampled visibilities in them.
  std::vector<bool> present(static_cast<size_t>(chunks), false);
  std::set<std::filesystem::path> seen;
  for (size_t k = 0; k < o.files.size(); ++k) {
    const auto& path = o.files[k];
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(path, ec);
    if (!seen.insert(ec ? std::filesystem::path(path) : canonical).second)
      throw UsageError(path, "is given twice: its chunks would be added twice");
    std::unique_ptr<storage::Uvh5Reader> other;
    if (k > 0) {
      other = std::make_unique<storage::Uvh5Reader>(path, /*read_uvw=*/false);
      check_same_set(*other, path, first, o.files[0]);
    }
    const storage::Uvh5Reader& file = k > 0 ? *other : first;
    const auto map = file.chunk_map();
    for (size_t c = 0; c < map.size(); ++c)
      if (map[c]) present[c] = true;
    for (auto& s : samples)
      if (map[static_cast<size_t>(s.chunk)]) {
        s.sum += file.visibility(s.row, s.chan);
        s.found = true;
      }
  }
  v.chunks_expected = chunks;
  v.chunks_present = static_cast<index_t>(std::count(present.begin(), present.end(), true));
  if (v.chunks_present < chunks) {
    const auto missing =
        static_cast<index_t>(std::find(present.begin(), present.end(), false) - present.begin());
    v.passed = false;
    v.reason = fmt::format(
        "{}: {} of {} chunks missing (first missing: baseline-time row {}, channel {})", set_name,
        chunks - v.chunks_present, chunks, missing / chan_chunks * first.chunk_rows(),
        missing % chan_chunks * first.chunk_channels());
  }

  // The sampled sums against the direct transform of the set's sky, or the
  // pattern of a synthetic set: that one exactly (each visibility was
  // written once, zeros elsewhere, and the values are small integers).
  v.synthetic = pv.synthetic;
  const auto reference =
      pv.synthetic ? pattern_reference(first.times()) : sky_reference(first, pv, o);
  RelativeError e;
  index_t compared = 0, wrong = 0;
  const Sample* first_wrong = nullptr;
  for (const auto& s : samples) {
    if (!s.found) continue;  // counted as missing above
    const cplx want = reference(s);
    e.add(CView2D(&s.sum, 1, 1), CView2D(&want, 1, 1));
    ++compared;
    if (s.sum != want && !wrong++) first_wrong = &s;
  }
  ErrorTally tally;
  tally.add(e);
  if (pv.synthetic && wrong > 0 && v.passed) {
    v.passed = false;
    v.reason = fmt::format(
        "{}: {} of {} sampled visibilities differ from the synthetic pattern (first: "
        "baseline-time row {}, channel {}: {} + {}i, expected {} + {}i)",
        set_name, wrong, compared, first_wrong->row, first_wrong->chan, first_wrong->sum.real(),
        first_wrong->sum.imag(), reference(*first_wrong).real(), reference(*first_wrong).imag());
  } else if (!pv.synthetic && !(e.value() <= o.tolerance) && v.passed) {
    v.passed = false;
    v.reason = fmt::format(
        "{}: sampled visibilities differ from the direct transform "
        "(relative RMSE {:.2e} > {:.1e})",
        set_name, e.value(), o.tolerance);
  }
  report::Accuracy a;
  a.vis_rmse = tally.pooled.value();
  a.vis_rmse_max = tally.worst;  // one set: the same figure
  a.vis_samples = compared;
  r.accuracy = a;
  r.verification = v;
  return r;
}

}  // namespace iotest::commands
