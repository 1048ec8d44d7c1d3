// `iotest verify FILE...`: re-reads visibility files written by iotest and
// checks that every chunk is there and that sampled visibilities equal the
// direct Fourier transform of the sky that made them (read from the file's
// provenance, or given with --source-count and --seed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "iotest/report/report.hpp"

namespace iotest::commands {

struct VerifyOptions {
  std::vector<std::string> files;
  std::optional<index_t> source_count;  // default: the file's
  std::optional<std::uint64_t> seed;    // default: the file's
  index_t samples = 1000;               // per file, at most one per chunk
  double tolerance = 1e-6;              // relative RMSE allowed
};

// The report says whether the files passed (verification.passed).
report::Report verify(const VerifyOptions& options);

}  // namespace iotest::commands
