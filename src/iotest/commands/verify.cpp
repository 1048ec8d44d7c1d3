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
    return first.as_stored(
        degrid::synthetic_visibility(s.row / first.times(), s.row % first.times(), s.chan, nonce));
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
        p_(config::resolve_rec_set(pv.rec_set, {std::nullopt, pv.margin})),
        binner_(rebuild_binner(pv, path)) {
    require_parts_inside(path);
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
  // The run's binning, from the files' provenance; an iotest that bins
  // otherwise would give other runs, so it must agree on the grid.
  std::unique_ptr<binning::Binner> rebuild_binner(const storage::Provenance& pv,
                                                  const std::string& path) const {
    const auto g = binning::grid_geometry(config::resolve_rec_set(pv.rec_set), obs_);
    if (g.pixel_lm != pv.pixel_lm)
      throw UsageError(path, fmt::format("its binning cannot be rebuilt: pixel {} here, {} in the "
                                         "file (written by another iotest version?)",
                                         g.pixel_lm, pv.pixel_lm));
    return std::make_unique<binning::Binner>(p_, obs_, g, binning::RunSplit{true, pv.w_stack_step});
  }
  void require_parts_inside(const std::string& path) const {
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
  const auto count = [&](const binning::VisRun& run) {
    out.visibilities += run.count();
    chunks.insert(chunk_of(row_of(run), run.chan_begin));
  };
  written.for_each_run(count);
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
  const auto pick = [&](const binning::VisRun& run) {
    for (; next < picks.size() && picks[next] < seen + run.count(); ++next) {
      const index_t row = row_of(run), chan = run.chan_begin + (picks[next] - seen);
      out.samples.push_back({row, chan, chunk_of(row, chan)});
    }
    seen += run.count();
  };
  written.for_each_run(pick);
  return out;
}

// The set's files, opened once: the first gives the axes, (u, v, w) and
// the sky for the whole set.
struct VerifiedSet {
  const VerifyOptions& o;
  std::vector<std::unique_ptr<storage::Reader>> files;
  const storage::Reader& first;
  const storage::Provenance& pv;
  index_t chan_chunks;
  std::string name;  // the set in reasons: the file, or the first and how many
  explicit VerifiedSet(const VerifyOptions& options)
      : o(options),
        files(storage::open_output_set(options.files)),
        first(*files[0]),
        pv(*first.provenance()),
        chan_chunks(first.channel_chunks()),
        name(options.files.size() == 1 ? options.files[0]
                                       : fmt::format("{} and {} more files", options.files[0],
                                                     options.files.size() - 1)) {}
  // Chunk c (row_chunk * chan_chunks + freq_chunk): its first row and channel.
  index_t row_of(index_t c) const { return c / chan_chunks * first.chunk_rows(); }
  index_t chan_of(index_t c) const { return c % chan_chunks * first.chunk_channels(); }
};

// One run's files: a file of another run (one an earlier run with the
// same options left behind) fails, as does a set from another run than
// --nonce's.
bool one_run(const VerifiedSet& set, report::Verification& v) {
  v.nonce = set.o.nonce.value_or(set.pv.nonce);
  v.command_line = set.pv.command_line;
  v.started = set.pv.started;
  for (const auto& f : set.files)
    if (const auto& host = f->provenance()->host;
        !host.empty() && std::find(v.hosts.begin(), v.hosts.end(), host) == v.hosts.end())
      v.hosts.push_back(host);
  for (size_t i = 0; i < set.files.size(); ++i)
    if (const auto nonce = set.files[i]->provenance()->nonce; nonce != v.nonce) {
      v.passed = false;
      v.reason = fmt::format("{} is from another run (its nonce is {}, {}'s {})", set.o.files[i],
                             nonce, set.o.nonce ? "--nonce" : set.o.files[0], v.nonce);
      return false;
    }
  return true;
}

// The samples, each summed over the files holding its chunk, and the
// first chunk expected in no file.
struct SampledSet {
  std::vector<Sample> samples;
  index_t first_missing = -1;
};

// A stonewalled set: the chunks its written parts fill, and samples of
// their visibilities.
SampledSet sample_stonewalled_set(const VerifiedSet& set, report::Verification& v) {
  std::vector<storage::WrittenPart> parts;
  for (const auto& file : set.files) {
    const auto listed = file->written_parts();
    parts.insert(parts.end(), listed.begin(), listed.end());
  }
  const WrittenRuns written(set.pv, storage::merge_written_parts(std::move(parts)), set.o.files[0]);
  auto picked = sample_written(written, set.first, set.o.samples);
  v.stonewalled = true;
  v.written_parts = static_cast<index_t>(written.size());
  v.visibilities_written = picked.visibilities;
  v.chunks_expected = static_cast<index_t>(picked.chunks.size());
  SampledSet out;
  for (const index_t c : picked.chunks) {
    if (std::any_of(set.files.begin(), set.files.end(), [&](const auto& file) {
          return file->chunk_present(set.row_of(c), set.chan_of(c));
        }))
      ++v.chunks_present;
    else if (out.first_missing < 0)
      out.first_missing = c;
  }
  out.samples = std::move(picked.samples);
  for (auto& s : out.samples)
    for (const auto& file : set.files)
      if (file->chunk_present(s.row, s.chan)) {
        s.sum += file->visibility(s.row, s.chan);
        s.found = true;
      }
  return out;
}

// One visibility in each of up to `wanted` of the set's chunks, chosen
// at random.
std::vector<Sample> sample_chunks(const VerifiedSet& set, index_t chunks, index_t wanted) {
  const auto& first = set.first;
  const index_t rows = first.baselines() * first.times();
  std::mt19937_64 rng(0x5eed);
  std::vector<Sample> samples;
  for (index_t i = 0; i < std::min(wanted, chunks); ++i) {
    const index_t c =
        chunks <= wanted ? i : static_cast<index_t>(rng() % static_cast<std::uint64_t>(chunks));
    const index_t row = std::min(
        rows - 1, set.row_of(c) +
                      static_cast<index_t>(rng() % static_cast<std::uint64_t>(first.chunk_rows())));
    const index_t chan = std::min(
        first.channels() - 1,
        set.chan_of(c) +
            static_cast<index_t>(rng() % static_cast<std::uint64_t>(first.chunk_channels())));
    samples.push_back({row, chan, c});
  }
  return samples;
}

// A whole set: every chunk, and one visibility in each of up to
// `samples` chunks.
SampledSet sample_whole_set(const VerifiedSet& set, report::Verification& v) {
  const index_t chunks = set.first.chunks_expected();
  SampledSet out;
  out.samples = sample_chunks(set, chunks, set.o.samples);
  std::vector<bool> present(static_cast<size_t>(chunks), false);
  for (const auto& file : set.files) {
    const auto map = file->chunk_map();
    for (size_t c = 0; c < map.size(); ++c)
      if (map[c]) present[c] = true;
    for (auto& s : out.samples)
      if (map[static_cast<size_t>(s.chunk)]) {
        s.sum += file->visibility(s.row, s.chan);
        s.found = true;
      }
  }
  v.chunks_expected = chunks;
  v.chunks_present = static_cast<index_t>(std::count(present.begin(), present.end(), true));
  if (v.chunks_present < chunks)
    out.first_missing =
        static_cast<index_t>(std::find(present.begin(), present.end(), false) - present.begin());
  return out;
}

void judge_missing_chunks(const VerifiedSet& set, index_t first_missing, report::Verification& v) {
  if (v.chunks_present >= v.chunks_expected) return;
  v.passed = false;
  v.reason =
      fmt::format("{}: {} of {} chunks{} missing (first missing: baseline-time row {}, channel {})",
                  set.name, v.chunks_expected - v.chunks_present, v.chunks_expected,
                  v.stonewalled ? " of the written parts" : "", set.row_of(first_missing),
                  set.chan_of(first_missing));
}

// The sampled sums against the direct transform of the set's sky, or the
// pattern of a synthetic set: that one exactly (each visibility was
// written once, zeros elsewhere, and the values are small integers).
report::Accuracy compare_samples(const VerifiedSet& set, const std::vector<Sample>& samples,
                                 report::Verification& v) {
  const auto& pv = set.pv;
  v.synthetic = pv.synthetic;
  const auto reference =
      pv.synthetic ? pattern_reference(set.first, pv.nonce) : sky_reference(set.first, pv, set.o);
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
        set.name, wrong, compared, first_wrong->row, first_wrong->chan, first_wrong->sum.real(),
        first_wrong->sum.imag(), reference(*first_wrong).real(), reference(*first_wrong).imag());
  } else if (!pv.synthetic && compared > 0 && !(e.value() <= set.o.tolerance) && v.passed) {
    v.passed = false;
    v.reason = fmt::format(
        "{}: sampled visibilities differ from the direct transform "
        "(relative RMSE {:.2e} > {:.1e})",
        set.name, e.value(), set.o.tolerance);
  }
  report::Accuracy a;
  a.vis_rmse = tally.pooled.value();
  a.vis_rmse_max = tally.worst;  // one set: the same figure
  a.vis_samples = compared;
  return a;
}

// What --all found so far: the values against the pattern, and the first
// chunk whose checksum differs.
struct EveryChunk {
  degrid::PatternCheck check;
  std::string first_bad;
  std::vector<cplx> chunk;  // one chunk's values
};

// File i's chunks, in the order they lie: against the CRC-32 their writer
// recorded, and for a synthetic set every value against the pattern too.
void check_file_chunks(const VerifiedSet& set, size_t i, EveryChunk& every,
                       report::Verification& v) {
  const auto& file = *set.files[i];
  const auto& path = set.o.files[i];
  const index_t chunk_bytes = static_cast<index_t>(every.chunk.size() * sizeof(cplx));
  // A shared file's chunk may have an entry per part (per writer).
  std::unordered_map<std::int64_t, std::vector<std::uint32_t>> sums;
  for (const auto& c : file.checksums()) sums[c.chunk].push_back(c.crc32);
  if (sums.empty() && !set.pv.synthetic)
    throw UsageError("--all", fmt::format("{} has no chunk checksums (written before iotest "
                                          "recorded them): its values can only be sampled",
                                          path));
  for (const auto& key : file.stored_chunks()) {
    const auto it = sums.find(key.row_chunk * set.chan_chunks + key.freq_chunk);
    // A stonewalled shared file has every chunk allocated, those past
    // the deadline unwritten: no writer recorded them.
    if (set.pv.stonewalled && !sums.empty() && it == sums.end()) continue;
    if (!file.read_chunk(key, every.chunk.data()))
      throw std::runtime_error(path + ": a chunk of its index could not be read");
    if (set.pv.synthetic) every.check.add(file, path, key, every.chunk.data(), v.nonce);
    if (sums.empty()) continue;
    ++v.chunks_checksummed;
    if (it != sums.end() && storage::combine_part_crc32(it->second, chunk_bytes) ==
                                file.chunk_checksum(key, every.chunk.data()))
      continue;
    if (v.checksums_wrong++ == 0)
      every.first_bad =
          fmt::format("{} row chunk {} frequency chunk {}", path, key.row_chunk, key.freq_chunk);
  }
}

// --all: every chunk of every file.
void check_every_chunk(const VerifiedSet& set, report::Verification& v) {
  const auto& first = set.first;
  EveryChunk every;
  every.chunk.resize(static_cast<size_t>(first.chunk_rows() * first.chunk_channels()));
  for (size_t i = 0; i < set.files.size(); ++i) check_file_chunks(set, i, every, v);
  const auto& check = every.check;
  v.all = true;
  v.values_checked = check.checked;
  v.values_wrong = check.wrong;
  const index_t expected = first.baselines() * first.times() * first.channels();
  if (v.passed && v.checksums_wrong > 0) {
    v.passed = false;
    v.reason = fmt::format("{}: {} chunks differ from what their writers wrote (first: {})",
                           set.name, v.checksums_wrong, every.first_bad);
  } else if (v.passed && check.wrong > 0) {
    v.passed = false;
    v.reason = fmt::format("{}: {} values differ from the synthetic pattern (first: {})", set.name,
                           check.wrong, check.first_wrong);
  } else if (v.passed && set.pv.synthetic && !set.pv.stonewalled && check.right != expected) {
    v.passed = false;
    v.reason =
        fmt::format("{}: {} of the observation's {} visibilities found ({})", set.name, check.right,
                    expected, check.right < expected ? "some missing" : "some twice");
  }
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
  const VerifiedSet set(o);
  if (one_run(set, v)) {
    const auto sampled =
        set.pv.stonewalled ? sample_stonewalled_set(set, v) : sample_whole_set(set, v);
    judge_missing_chunks(set, sampled.first_missing, v);
    r.accuracy = compare_samples(set, sampled.samples, v);
    if (o.all) check_every_chunk(set, v);
  }
  r.verification = v;
  return r;
}

}  // namespace iotest::commands
