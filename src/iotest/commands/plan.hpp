// `iotest plan`: resolved parameters, counts, memory per role and the rank
// count for a recombination set, without computing anything heavy.
#pragma once

#include <optional>
#include <string>

#include "iotest/binning/binning.hpp"
#include "iotest/report/report.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::commands {

// Queue depths the memory estimates assume (DESIGN.md section 2 defaults).
inline constexpr index_t kDefaultSendQueue = 8;
inline constexpr index_t kDefaultSubgridQueue = 32;

// Adds the visibility side (counts, volume, grid, distribution) to a report.
void add_observation(report::Report& r, const telescope::Observation& obs,
                     const binning::GridGeometry& g, const binning::Distribution& d);

// Usage errors shared by the commands that build a sky and run in one
// process: the source count must fit the used image, and the estimated
// memory this machine.
void require_source_count(const config::RecombinationParams& p, index_t source_count);
void require_memory(const config::RecombinationParams& p, index_t bytes);

report::Memory estimate_memory(const config::RecombinationParams& p, int threads);

struct PlanOptions {
  std::string rec_set;
  index_t nodes = 1;
  std::optional<double> window_width;
  std::optional<telescope::ObservationOptions> observation;  // with --vis-set
};
report::Report plan(const PlanOptions& options);

}  // namespace iotest::commands
