#include "iotest/storage/output_set.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "iotest/common/errors.hpp"
#include "iotest/storage/storage_progress.hpp"

namespace iotest::storage {

const Provenance& provenance_of(const Reader& file, const std::string& path) {
  if (!file.provenance())
    throw UsageError(path, "has no iotest provenance (rec-set, sky): not written by iotest");
  const auto& pv = *file.provenance();
  // A sky's file from before visibilities were in Jy holds values 1/N^2 of
  // today's: refused rather than rescaled, so no reader (verify, grid, the
  // imaging direction) has to know the old scale.
  if (!pv.synthetic && pv.vis_units != kJanskyUnits)
    throw UsageError(path, fmt::format("holds visibilities in units \"{}\", not Jy: written by "
                                       "an iotest before visibilities were in Jy (1/N^2 of them); "
                                       "write it again",
                                       pv.vis_units));
  return pv;
}

namespace {

// Files of one output set share the observation's shape and the sky.
void check_same_set(const Reader& file, const std::string& path, const Reader& first,
                    const std::string& first_path) {
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
  const auto kind = [](const Provenance& pv) {
    return pv.synthetic ? "synthetic (--synthetic-vis)" : "a sky's";
  };
  if (a.synthetic != b.synthetic)
    throw UsageError(path, fmt::format("is {} and {} is {}: synthetic and sky files do not mix",
                                       kind(a), first_path, kind(b)));
  mismatch("iotest_rec_set", a.rec_set, b.rec_set);
  mismatch("iotest_pixel_lm", a.pixel_lm, b.pixel_lm);
  mismatch("iotest_source_count", a.source_count, b.source_count);
  mismatch("iotest_seed", a.seed, b.seed);
  mismatch("iotest_stonewalled", a.stonewalled, b.stonewalled);
  mismatch("iotest_vis_set", a.observation.vis_set, b.observation.vis_set);
  mismatch("iotest_time", a.observation.time.value_or(""), b.observation.time.value_or(""));
  mismatch("iotest_freq", a.observation.freq.value_or(""), b.observation.freq.value_or(""));
  mismatch("iotest_margin", a.margin, b.margin);
  mismatch("iotest_w_stack_step", a.w_stack_step, b.w_stack_step);
}

}  // namespace

std::vector<std::unique_ptr<Reader>> open_output_set(const std::vector<std::string>& paths,
                                                     const StorageOptions& options) {
  std::vector<std::unique_ptr<Reader>> files;
  std::set<std::filesystem::path> seen;
  for (const auto& path : paths) {
    std::error_code ec;
    // A path's lookup is a storage call too (seen: a client whose link
    // was cut blocked here, before the reader's own marks).
    const auto canonical = [&] {
      const WatchedCall call(StorageStep::opening, path);
      return std::filesystem::weakly_canonical(path, ec);
    }();
    if (!seen.insert(ec ? std::filesystem::path(path) : canonical).second)
      throw UsageError(path, "is given twice: its chunks would be added twice");
    files.push_back(open_reader(path, options));
    if (files.size() == 1)
      provenance_of(*files[0], path);
    else
      check_same_set(*files.back(), path, *files[0], paths[0]);
  }
  return files;
}

index_t require_whole_observation(const std::vector<std::unique_ptr<Reader>>& files,
                                  const std::vector<std::string>& paths,
                                  const telescope::Observation& obs) {
  for (size_t i = 0; i < files.size(); ++i) {
    const auto mismatch = [&](const char* what, index_t got, index_t want) {
      if (got != want)
        throw UsageError(paths[i], fmt::format("{} {} does not match its provenance's "
                                               "observation ({})",
                                               what, got, want));
    };
    mismatch("Nbls", files[i]->baselines(), obs.baseline_count());
    mismatch("Ntimes", files[i]->times(), obs.time.steps);
    mismatch("Nfreqs", files[i]->channels(), obs.freq.steps);
  }
  std::vector<bool> whole;
  index_t stored = 0;
  for (const auto& f : files) {
    const auto map = f->chunk_map();
    whole.resize(map.size(), false);
    for (size_t c = 0; c < map.size(); ++c)
      if (map[c]) {
        whole[c] = true;
        ++stored;
      }
  }
  const auto missing = std::count(whole.begin(), whole.end(), false);
  if (missing > 0)
    throw UsageError(paths.front(),
                     fmt::format("{} of the observation's {} chunks are in none of the {} "
                                 "file(s): an incomplete output set (a file left out?)",
                                 missing, whole.size(), files.size()));
  return stored;
}

}  // namespace iotest::storage
