// Which way a recombination runs: predict (facets to subgrids, the
// visibilities written), image (subgrids to facets, the visibilities read),
// or both (the self-calibration major cycle). `iotest recombine` and
// `iotest run` take it alike.
#pragma once

#include <string>

namespace iotest::swiftly {

enum class Direction { predict, image, both };
Direction parse_direction(const std::string& text);  // throws UsageError("--direction")
std::string to_string(Direction d);

}  // namespace iotest::swiftly
