// `iotest recombine`: the SwiFTly recombination of a whole set in one
// process, each direction timed on its own and checked against the direct
// Fourier transform of a random point-source sky.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "iotest/report/report.hpp"
#include "iotest/swiftly/direction.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::commands {

using swiftly::Direction;

struct Options {
  std::string rec_set = "T05_";
  index_t source_count = 10;
  std::uint64_t seed = 1;
  Direction direction = Direction::both;
  std::optional<index_t> subgrids;     // nothing: every subgrid of the grid
  std::optional<index_t> check;        // subgrids checked; nothing: up to 64
  bool check_all = false;              // check every processed subgrid
  int threads = 0;                     // 0: OpenMP's default
  std::optional<double> window_width;  // override the set's W
};

// One subgrid of the walk: its tiles on both axes.
struct SubgridPosition {
  swiftly::Tile t0, t1;
};
// A column of the walk: subgrids sharing their axis-0 tile.
struct SubgridColumn {
  swiftly::Tile t0;
  std::vector<swiftly::Tile> t1;
};

// The `count` subgrids nearest the grid centre, grouped into columns (the
// walk order: columns by axis-0 offset, subgrids by axis-1 offset).
std::vector<SubgridColumn> plan_walk(const config::RecombinationParams& p, index_t count);

report::Report run(const Options& options);

}  // namespace iotest::commands
