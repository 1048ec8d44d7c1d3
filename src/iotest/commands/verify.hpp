// `iotest verify FILE...`: re-reads the visibility files of one output set
// written by iotest (one file, or one per writer: each with the whole
// observation's shape, holding the chunks its writer wrote) and checks that
// every chunk is in at least one file and that sampled visibilities, summed
// over the files holding their chunk, equal the direct Fourier transform of
// the sky that made them (read from the files' provenance, or given with
// --source-count and --seed); the files of a --synthetic-vis run must hold
// degrid::synthetic_visibility's pattern exactly. Files that differ in
// shape or provenance (synthetic or not among them) are a UsageError.
// A stonewalled set (--duration) lists the parts it wrote: verify rebuilds
// the run's binning, expects exactly the chunks those parts fill (failing
// on any missing) and samples only their visibilities; chunks at the
// parts' edges hold zeros for the visibilities no part wrote.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "iotest/report/report.hpp"

namespace iotest::commands {

struct VerifyOptions {
  std::vector<std::string> files;
  std::optional<index_t> source_count;  // default: the files'
  std::optional<std::uint64_t> seed;    // default: the files'
  index_t samples = 1000;               // over the whole set, at most one per chunk
  double tolerance = 1e-6;              // relative RMSE allowed
  // The run the files must come from (its report's config.nonce); default:
  // the first file's, and every file must share it.
  std::optional<std::uint32_t> nonce;
  // Every value, not samples: exactly, for --synthetic-vis sets.
  bool all = false;
};

// The report says whether the files passed (verification.passed).
report::Report verify(const VerifyOptions& options);

}  // namespace iotest::commands
