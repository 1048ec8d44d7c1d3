#include "iotest/telescope/layout.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace iotest::telescope {
namespace {

// Fields of one line split on commas or whitespace.
std::vector<std::string_view> split_fields(std::string_view line, bool commas) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    if (commas) {
      const size_t end = std::min(line.find(',', i), line.size());
      fields.push_back(line.substr(i, end - i));
      i = end + 1;
    } else {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      size_t end = i;
      while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
      if (end > i) fields.push_back(line.substr(i, end - i));
      i = end;
    }
  }
  return fields;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

double to_number(std::string_view field, const std::string& where) {
  field = trim(field);
  double value = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || ec != std::errc() || end != field.data() + field.size() ||
      !std::isfinite(value))
    throw std::runtime_error(where + ": expected a number, got '" + std::string(field) + "'");
  return value;
}

}  // namespace

double Layout::max_baseline_m() const {
  double longest = 0;
  for (size_t i = 0; i < antennas.size(); ++i)
    for (size_t j = i + 1; j < antennas.size(); ++j) {
      const double de = antennas[i].east - antennas[j].east,
                   dn = antennas[i].north - antennas[j].north, du = antennas[i].up - antennas[j].up;
      longest = std::max(longest, de * de + dn * dn + du * du);
    }
  return std::sqrt(longest);
}

Layout parse_layout(std::string_view text, LayoutFormat format, const Geodetic& centre,
                    const std::string& source) {
  Layout layout;
  layout.centre = centre;
  const bool commas = format != LayoutFormat::ecef_cfg;
  const size_t columns = format == LayoutFormat::lonlat_csv ? 2 : 3;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = std::min(text.find('\n'), text.size());
    const std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(std::min(nl + 1, text.size()));
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const std::string where = source + ":" + std::to_string(line_no);
    const auto fields = split_fields(line, commas);
    if (fields.size() < columns)
      throw std::runtime_error(where + ": expected " + std::to_string(columns) + " fields, got " +
                               std::to_string(fields.size()));
    switch (format) {
      case LayoutFormat::enu_csv:
        layout.antennas.push_back({to_number(fields[0], where), to_number(fields[1], where),
                                   to_number(fields[2], where)});
        break;
      case LayoutFormat::lonlat_csv:
      case LayoutFormat::named_lonlat_csv: {
        const size_t first = format == LayoutFormat::named_lonlat_csv ? 1 : 0;
        const Geodetic g{to_number(fields[first], where), to_number(fields[first + 1], where),
                         centre.height_m};
        if (std::abs(g.lat_deg) > 90 || std::abs(g.lon_deg) > 360)
          throw std::runtime_error(where + ": longitude/latitude out of range");
        layout.antennas.push_back(ecef_to_enu(geodetic_to_ecef(g), centre));
        break;
      }
      case LayoutFormat::ecef_cfg:
        layout.antennas.push_back(ecef_to_enu(
            {to_number(fields[0], where), to_number(fields[1], where), to_number(fields[2], where)},
            centre));
        break;
    }
  }
  if (layout.antennas.size() < 2)
    throw std::runtime_error(source + ": a layout needs at least 2 antennas, found " +
                             std::to_string(layout.antennas.size()));
  return layout;
}

std::string_view embedded_layout(std::string_view file_name) {
  for (const auto& f : embedded_layout_files())
    if (f.name == file_name) return f.text;
  throw std::out_of_range("no embedded layout file '" + std::string(file_name) + "'");
}

}  // namespace iotest::telescope
