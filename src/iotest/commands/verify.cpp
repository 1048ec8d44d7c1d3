#include "iotest/commands/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "iotest/binning/binning.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/config/rec_set.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/storage/output_set.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/telescope/geodesy.hpp"

namespace iotest::commands {
namespace {

struct Sample {
  index_t row = 0, chan = 0, chunk = 0;
  cplx sum{0, 0};      // over the files holding the chunk
  bool found = false;  // in at least one file
};

// What the sampled visibility should be: the direct transform of the set's
// sky, or for a synthetic set the pattern that names it.
using Reference = std::function<cplx(const Sample&)>;

Reference sky_reference(const storage::Reader& first, const storage::Provenance& pv,
                        const VerifyOptions& o) {
  const auto p = config::resolve_rec_set(pv.rec_set);
  auto sources = sky::random_sources(o.source_count.value_or(pv.source_count), p.used_size,
                                     o.seed.value_or(pv.seed));
  // In Jy: files in the old scale were refused on opening (provenance_of).
  return [&first, pv, sources = std::move(sources)](const Sample& s) {
    const double scale =
        first.frequencies()[static_cast<size_t>(s.chan)] / telescope::kSpeedOfLight;
    const auto b = first.uvw(s.row);
    return sky::direct_visibility(sources, pv.pixel_lm, scale * b[0], scale * b[1], scale * b[2]);
  };
}

// As the files store it (an MS in single precision).
Reference pattern_reference(const storage::Reader& first, std::uint32_t nonce) {
  return [&first, nonce](const Sample& s) {
    return first.as_stored(degrid::synthetic_visibility(s.row / first.times(),
                                                        s.row % first.times(), s.chan, nonce));
  };
}

// The visibilities of a stonewalled set's written parts, from the binning
// the run used (rebuilt from the files' provenance): each part's runs, in
// storage order. Nothing per visibility is kept.
class WrittenRuns {
 public:
  WrittenRuns(const storage::Provenance& pv, std::vector<storage::WrittenPart> parts,
              const std::string& path)
      : parts_(std::move(parts)),
        obs_(telescope::make_observation(pv.observation)),
        p_(config::resolve_rec_set(pv.rec_set, {std::nullopt, pv.margin})) {
    const auto g = binning::grid_geometry(config::resolve_rec_set(pv.rec_set), obs_);
    if (g.pixel_lm != pv.pixel_lm)
      throw UsageError(path, fmt::format("its binning cannot be rebuilt: pixel {} here, {} in the "
                                         "file (written by another iotest version?)",
                                         g.pixel_lm, pv.pixel_lm));
    binner_ =
        std::make_unique<binning::Binner>(p_, obs_, g, binning::RunSplit{true, pv.w_stack_step});
    const index_t subgrids = binner_->locator().per_axis() * binner_->locator().per_axis();
    const index_t rows = obs_.baseline_count() * obs_.time.steps;
    const index_t row_chunks = (rows + obs_.time.chunk - 1) / obs_.time.chunk;
    for (const auto& part : parts_)
      if (part.w_stack < binner_->first_stack() ||
          part.w_stack >= binner_->first_stack() + binner_->stacks() || part.subgrid < 0 ||
          part.subgrid >= subgrids || part.row_chunk_begin < 0 ||
          part.row_chunk_begin >= part.row_chunk_end || part.row_chunk_end > row_chunks)
        throw UsageError(path, fmt::format("iotest/written_parts lists a part outside the "
                                           "observation (w-stack {}, subgrid {}, row chunks {}-{})",
                                           part.w_stack, part.subgrid, part.row_chunk_begin,
                                           part.row_chunk_end));
  }
  size_t size() const { return parts_.size(); }
  // visit(run) for every run of every part.
  template <class Visit>
  void for_each_run(Visit&& visit) const {
    const index_t times = obs_.time.steps, rows = obs_.baseline_count() * times;
    for (const auto& part : parts_) {
      const index_t r0 = part.row_chunk_begin * obs_.time.chunk;
      const index_t r1 = std::min(rows, part.row_chunk_end * obs_.time.chunk);
      for (index_t b = r0 / times; b * times < r1; ++b)
        binner_->visit_runs(b, std::max<index_t>(0, r0 - b * times),
                            std::min(times, r1 - b * times), part.w_stack, part.subgrid, true,
                            visit);
    }
  }

 private:
  std::vector<storage::WrittenPart> parts_;
  telescope::Observation obs_;
  config::RecombinationParams p_;
  std::unique_ptr<binning::Binner> binner_;
};

// Up to `wanted` visibilities of a stonewalled set's written parts, chosen
// at random (uniformly over the visibilities), and the chunks the parts
// fill (sorted indices row_chunk * freq_chunks + freq_chunk).
struct WrittenSample {
  std::vector<Sample> samples;
  std::vector<index_t> chunks;
  index_t visibilities = 0;
};
WrittenSample sample_written(const WrittenRuns& written, const storage::Reader& first,
                             index_t wanted) {
  WrittenSample out;
  std::unordered_set<index_t> chunks;
  const index_t times = first.times(), chan_chunks = first.channel_chunks();
  const auto row_of = [&](const binning::VisRun& run) { return run.baseline * times + run.time; };
  const auto chunk_of = [&](index_t row, index_t chan) {
    return row / first.chunk_rows() * chan_chunks + chan / first.chunk_channels();
  };
  written.for_each_run([&](const binning::VisRun& run) {
    out.visibilities += run.count();
    chunks.insert(chunk_of(row_of(run), run.chan_begin));
  });
  out.chunks.assign(chunks.begin(), chunks.end());
  std::sort(out.chunks.begin(), out.chunks.end());
  // Which visibilities, as indices into the walk above; then a second walk picks them.
  std::mt19937_64 rng(0x5eed);
  std::vector<index_t> picks;
  for (index_t i = 0; i < std::min(wanted, out.visibilities); ++i)
    picks.push_back(static_cast<index_t>(rng() % static_cast<std::uint64_t>(out.visibilities)));
  std::sort(picks.begin(), picks.end());
  picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
  size_t next = 0;
  index_t seen = 0;
  written.for_each_run([&](const binning::VisRun& run) {
    for (; next < picks.size() && picks[next] < seen + run.count(); ++next) {
      const index_t row = row_of(run), chan = run.chan_begin + (picks[next] - seen);
      out.samples.push_back({row, chan, chunk_of(row, chan)});
    }
    seen += run.count();
  });
  return out;
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

  // Every file, opened once; the first gives the axes, (u, v, w) and the
  // sky for the whole set.
  const auto files = storage::open_output_set(o.files);
  const storage::Reader& first = *files[0];
  const auto& pv = *first.provenance();
  const index_t chan_chunks = first.channel_chunks();
  // One run's files: a file of another run (one an earlier run with the
  // same options left behind) fails, as does a set from another run than
  // --nonce's.
  v.nonce = o.nonce.value_or(pv.nonce);
  v.command_line = pv.command_line;
  v.started = pv.started;
  for (const auto& f : files)
    if (const auto& host = f->provenance()->host;
        !host.empty() && std::find(v.hosts.begin(), v.hosts.end(), host) == v.hosts.end())
      v.hosts.push_back(host);
  for (size_t i = 0; i < files.size(); ++i)
    if (const auto nonce = files[i]->provenance()->nonce; nonce != v.nonce) {
      v.passed = false;
      v.reason = fmt::format("{} is from another run (its nonce is {}, {}'s {})", o.files[i], nonce,
                             o.nonce ? "--nonce" : o.files[0], v.nonce);
      r.verification = v;
      return r;
    }

  std::vector<Sample> samples;
  index_t first_missing = -1;  // a chunk expected in no file
  if (pv.stonewalled) {
    // A stonewalled set: the chunks its written parts fill, and samples of
    // their visibilities.
    std::vector<storage::WrittenPart> parts;
    for (const auto& file : files) {
      const auto listed = file->written_parts();
      parts.insert(parts.end(), listed.begin(), listed.end());
    }
    const WrittenRuns written(pv, storage::merge_written_parts(std::move(parts)), o.files[0]);
    auto picked = sample_written(written, first, o.samples);
    v.stonewalled = true;
    v.written_parts = static_cast<index_t>(written.size());
    v.visibilities_written = picked.visibilities;
    v.chunks_expected = static_cast<index_t>(picked.chunks.size());
    for (const index_t c : picked.chunks) {
      const index_t row = c / chan_chunks * first.chunk_rows(),
                    chan = c % chan_chunks * first.chunk_channels();
      if (std::any_of(files.begin(), files.end(),
                      [&](const auto& file) { return file->chunk_present(row, chan); }))
        ++v.chunks_present;
      else if (first_missing < 0)
        first_missing = c;
    }
    samples = std::move(picked.samples);
    for (auto& s : samples)
      for (const auto& file : files)
        if (file->chunk_present(s.row, s.chan)) {
          s.sum += file->visibility(s.row, s.chan);
          s.found = true;
        }
  } else {
    // A whole set: every chunk, and one visibility in each of up to
    // `samples` chunks, chosen at random.
    const index_t rows = first.baselines() * first.times();
    const index_t chunks = first.chunks_expected();
    std::mt19937_64 rng(0x5eed);
    for (index_t i = 0; i < std::min(o.samples, chunks); ++i) {
      const index_t c = chunks <= o.samples
                            ? i
                            : static_cast<index_t>(rng() % static_cast<std::uint64_t>(chunks));
      const index_t row = std::min(
          rows - 1,
          c / chan_chunks * first.chunk_rows() +
              static_cast<index_t>(rng() % static_cast<std::uint64_t>(first.chunk_rows())));
      const index_t chan = std::min(
          first.channels() - 1,
          c % chan_chunks * first.chunk_channels() +
              static_cast<index_t>(rng() % static_cast<std::uint64_t>(first.chunk_channels())));
      samples.push_back({row, chan, c});
    }
    std::vector<bool> present(static_cast<size_t>(chunks), false);
    for (const auto& file : files) {
      const auto map = file->chunk_map();
      for (size_t c = 0; c < map.size(); ++c)
        if (map[c]) present[c] = true;
      for (auto& s : samples)
        if (map[static_cast<size_t>(s.chunk)]) {
          s.sum += file->visibility(s.row, s.chan);
          s.found = true;
        }
    }
    v.chunks_expected = chunks;
    v.chunks_present = static_cast<index_t>(std::count(present.begin(), present.end(), true));
    if (v.chunks_present < chunks)
      first_missing =
          static_cast<index_t>(std::find(present.begin(), present.end(), false) - present.begin());
  }
  if (v.chunks_present < v.chunks_expected) {
    v.passed = false;
    v.reason = fmt::format(
        "{}: {} of {} chunks{} missing (first missing: baseline-time row {}, channel {})", set_name,
        v.chunks_expected - v.chunks_present, v.chunks_expected,
        v.stonewalled ? " of the written parts" : "",
        first_missing / chan_chunks * first.chunk_rows(),
        first_missing % chan_chunks * first.chunk_channels());
  }

  // The sampled sums against the direct transform of the set's sky, or the
  // pattern of a synthetic set: that one exactly (each visibility was
  // written once, zeros elsewhere, and the values are small integers).
  v.synthetic = pv.synthetic;
  const auto reference =
      pv.synthetic ? pattern_reference(first, pv.nonce) : sky_reference(first, pv, o);
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
  } else if (!pv.synthetic && compared > 0 && !(e.value() <= o.tolerance) && v.passed) {
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
  if (o.all) {
    // Every chunk of every file, in the order they lie: against the CRC-32
    // its writer recorded, and for a synthetic set every value against the
    // pattern too.
    degrid::PatternCheck check;
    std::string first_bad;
    std::vector<cplx> chunk(static_cast<size_t>(first.chunk_rows() * first.chunk_channels()));
    const index_t chunk_bytes = static_cast<index_t>(chunk.size() * sizeof(cplx));
    for (size_t i = 0; i < files.size(); ++i) {
      // A shared file's chunk may have an entry per part (per writer).
      std::unordered_map<std::int64_t, std::vector<std::uint32_t>> sums;
      for (const auto& c : files[i]->checksums()) sums[c.chunk].push_back(c.crc32);
      if (sums.empty() && !pv.synthetic)
        throw UsageError("--all", fmt::format("{} has no chunk checksums (written before iotest "
                                              "recorded them): its values can only be sampled",
                                              o.files[i]));
      for (const auto& key : files[i]->stored_chunks()) {
        // A stonewalled shared file has every chunk allocated, those past
        // the deadline unwritten: no writer recorded them.
        if (pv.stonewalled && !sums.empty() &&
            !sums.count(key.row_chunk * chan_chunks + key.freq_chunk))
          continue;
        if (!files[i]->read_chunk(key, chunk.data()))
          throw std::runtime_error(o.files[i] + ": a chunk of its index could not be read");
        if (pv.synthetic) check.add(*files[i], o.files[i], key, chunk.data(), v.nonce);
        if (sums.empty()) continue;
        ++v.chunks_checksummed;
        const auto it = sums.find(key.row_chunk * chan_chunks + key.freq_chunk);
        if (it != sums.end() && storage::combine_part_crc32(it->second, chunk_bytes) ==
                                    files[i]->chunk_checksum(key, chunk.data()))
          continue;
        if (v.checksums_wrong++ == 0)
          first_bad = fmt::format("{} row chunk {} frequency chunk {}", o.files[i], key.row_chunk,
                                  key.freq_chunk);
      }
    }
    v.all = true;
    v.values_checked = check.checked;
    v.values_wrong = check.wrong;
    const index_t expected = first.baselines() * first.times() * first.channels();
    if (v.passed && v.checksums_wrong > 0) {
      v.passed = false;
      v.reason = fmt::format("{}: {} chunks differ from what their writers wrote (first: {})",
                             set_name, v.checksums_wrong, first_bad);
    } else if (v.passed && check.wrong > 0) {
      v.passed = false;
      v.reason = fmt::format("{}: {} values differ from the synthetic pattern (first: {})",
                             set_name, check.wrong, check.first_wrong);
    } else if (v.passed && pv.synthetic && !pv.stonewalled && check.right != expected) {
      v.passed = false;
      v.reason = fmt::format("{}: {} of the observation's {} visibilities found ({})", set_name,
                             check.right, expected,
                             check.right < expected ? "some missing" : "some twice");
    }
  }
  r.verification = v;
  return r;
}

}  // namespace iotest::commands
