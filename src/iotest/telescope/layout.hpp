// Antenna layouts: the public position files of data/layouts (embedded in
// the library at build time) in their four formats, all brought to local
// east-north-up metres about the array centre.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "iotest/telescope/geodesy.hpp"

namespace iotest::telescope {

enum class LayoutFormat {
  enu_csv,           // x,y,z: metres east, north, up of the centre
  lonlat_csv,        // lon,lat in degrees (WGS84), at the centre's height
  named_lonlat_csv,  // name,lon,lat in degrees
  ecef_cfg,          // '#' header, then X Y Z diameter name: ECEF metres
};

struct Layout {
  std::string name;
  Geodetic centre;
  std::vector<Enu> antennas;
  double max_baseline_m() const;  // longest antenna separation
};

// Parses a layout file's text. Throws std::runtime_error naming `source`
// and the line for a malformed file.
Layout parse_layout(std::string_view text, LayoutFormat format, const Geodetic& centre,
                    const std::string& source);

struct EmbeddedFile {
  std::string_view name;  // file name under data/layouts
  std::string_view text;
};
const std::vector<EmbeddedFile>& embedded_layout_files();
// The text of an embedded layout file; throws std::out_of_range.
std::string_view embedded_layout(std::string_view file_name);

}  // namespace iotest::telescope
