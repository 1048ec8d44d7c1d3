// `iotest layout`: a visibility set's antennas (east-north-up) and the
// (u, v, w) of a few baselines, to inspect a layout or check it against an
// independent computation.
#pragma once

#include "iotest/report/report.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::commands {

struct LayoutOptions {
  telescope::ObservationOptions observation;
  index_t baselines = 3;  // (u, v, w) of this many baselines, spread over the list
};

report::Report layout(const LayoutOptions& options);

}  // namespace iotest::commands
