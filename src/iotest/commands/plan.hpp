// `iotest plan`: resolved parameters, counts, memory per role and the rank
// count for a recombination set, without computing anything heavy.
#pragma once

#include <optional>
#include <string>

#include "iotest/report/report.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::commands {

struct PlanOptions {
  std::string rec_set;
  index_t nodes = 1;
  std::optional<double> window_width;
  std::optional<telescope::ObservationOptions> observation;  // with --vis-set
};
report::Report plan(const PlanOptions& options);

}  // namespace iotest::commands
