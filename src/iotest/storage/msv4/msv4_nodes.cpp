#include "iotest/storage/msv4/msv4_nodes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numbers>

#include "iotest/storage/provenance_json.hpp"
#include "iotest/telescope/catalog_frame.hpp"
#include "iotest/telescope/geodesy.hpp"
#include "iotest/telescope/observation.hpp"

#ifndef IOTEST_VERSION
#define IOTEST_VERSION "unknown"
#endif

namespace iotest::storage::msv4 {
namespace {

using nlohmann::json;

// Non-dimension coordinates, named as xarray finds them (CF's attribute).
constexpr const char* kVisibilityCoordinates =
    "baseline_antenna1_name baseline_antenna2_name field_name scan_name";
constexpr const char* kFieldName = "iotest";

std::string antenna_name(index_t a) {
  return "ANT" + std::to_string(a);
}

// What verify and read need beyond the MSv4: the axes and chunks, and the
// provenance (the ms back-end's IOTEST_LAYOUT keyword, with the file).
json iotest_attribute(const VisibilityLayout& l) {
  const auto& obs = *l.observation;
  return {{"baselines", l.baselines},
          {"times", l.times},
          {"channels", l.channels},
          {"first_channel", l.file_first_channel()},
          {"file_channels", l.file_channels()},
          {"freq_start_hz", obs.freq.at(0)},
          {"freq_step_hz", obs.freq.step()},
          {"time_chunk", l.time_chunk},
          {"freq_chunk", l.freq_chunk},
          {"first_freq_chunk", l.first_freq_chunk},
          {"file", l.file},
          {"files", l.files},
          {"checksum_of", kChecksumOfStoredCells},
          {"provenance", l.provenance ? provenance_json(*l.provenance) : json(nullptr)}};
}

json group_attributes(const VisibilityLayout& l) {
  const bool synthetic = l.provenance && l.provenance->synthetic;
  const std::string date = l.provenance ? l.provenance->started : std::string();
  json a;
  a["schema_version"] = kSchemaVersion;
  a["creator"] = {{"software_name", "iotest"}, {"version", IOTEST_VERSION}};
  a["creation_date"] = date;
  a["type"] = "visibility";
  a["data_groups"] = {{"base",
                       {{"correlated_data", "VISIBILITY"},
                        {"flag", "FLAG"},
                        {"weight", "WEIGHT"},
                        {"uvw", "UVW"},
                        {"field_and_source", "field_and_source_base_xds"},
                        {"description", "iotest's predicted visibilities"},
                        {"date", date}}}};
  a["observation_info"] = {
      {"observer", {"iotest"}},
      {"project_UID", "iotest"},
      {"release_date", date},
      {"observing_log", synthetic ? "iotest --synthetic-vis: a pattern naming each visibility"
                                  : "iotest: predicted visibilities of a point-source sky"}};
  a["processor_info"] = {{"type", "CORRELATOR"}, {"sub_type", "iotest"}};
  a[kLayoutAttribute] = iotest_attribute(l);
  return a;
}

// time, baseline, frequency and polarization, and their labels.
void add_coordinates(const VisibilityLayout& l, std::vector<SmallArray>& arrays) {
  const auto& obs = *l.observation;
  std::vector<double> time;
  for (index_t t = 0; t < l.times; ++t)
    time.push_back(unix_from_mjd_seconds(telescope::mjd_seconds_utc(obs, t)));
  const double step = obs.time.step() / telescope::kSiderealPerSolar;
  arrays.push_back(numbers("time", time, {l.times}, {"time"},
                           {{"type", "time"},
                            {"units", "s"},
                            {"scale", "utc"},
                            {"format", "unix"},
                            {"integration_time", quantity(step > 0 ? step : 1.0, "s")}}));
  arrays.push_back(
      strings("field_name", std::vector<std::string>(l.times, kFieldName), {l.times}, {"time"}));
  arrays.push_back(strings("scan_name", std::vector<std::string>(l.times, "1"), {l.times}, {"time"},
                           {{"scan_intents", {"OBSERVE_TARGET#ON_SOURCE"}}}));
  std::vector<std::int64_t> ids;
  std::vector<std::string> first, second;
  for (const auto& [p, q] : obs.baselines()) {
    ids.push_back(static_cast<std::int64_t>(ids.size()));
    first.push_back(antenna_name(p));
    second.push_back(antenna_name(q));
  }
  arrays.push_back(integers("baseline_id", ids, {"baseline_id"}));
  arrays.push_back(strings("baseline_antenna1_name", first, {l.baselines}, {"baseline_id"}));
  arrays.push_back(strings("baseline_antenna2_name", second, {l.baselines}, {"baseline_id"}));
  std::vector<double> hz;
  for (index_t k = 0; k < l.file_channels(); ++k)
    hz.push_back(obs.freq.at(l.file_first_channel() + k));
  const double width = obs.freq.step() > 0 ? obs.freq.step() : 1.0;
  json reference = {{"data", hz.front()},
                    {"dims", json::array()},
                    {"attrs", {{"units", "Hz"}, {"observer", "TOPO"}, {"type", "spectral_coord"}}}};
  arrays.push_back(numbers("frequency", hz, {l.file_channels()}, {"frequency"},
                           {{"type", "spectral_coord"},
                            {"units", "Hz"},
                            {"observer", "TOPO"},
                            {"spectral_window_name", fmt::format("spw_{}", l.file)},
                            {"spectral_window_intents", {"UNSPECIFIED"}},
                            {"reference_frequency", reference},
                            {"channel_width", quantity(width, "Hz")}}));
  arrays.push_back(strings("polarization", {"XX"}, {1}, {"polarization"}));
  arrays.push_back(strings("uvw_label", {"u", "v", "w"}, {3}, {"uvw_label"}));
}

// antenna_xds: the array's antennas, as the ms back-end's ANTENNA.
void add_antennas(const VisibilityLayout& l, std::vector<SmallArray>& arrays, json& groups) {
  const auto& obs = *l.observation;
  const index_t n = obs.antenna_count();
  groups["antenna_xds"] = group_doc({{"type", "antenna"},
                                     {"relocatable_antennas", false},
                                     {"overall_telescope_name", obs.vis_set}});
  std::vector<std::string> names, mounts(n, "alt-az"), telescopes(n, obs.vis_set), feeds;
  std::vector<double> position, angle, dish(n, 25.0);  // the layouts give no dish size: VLA's
  for (index_t a = 0; a < n; ++a) {
    names.push_back(antenna_name(a));
    const auto p =
        telescope::enu_to_ecef(obs.layout.antennas[static_cast<size_t>(a)], obs.layout.centre);
    position.insert(position.end(), {p.x, p.y, p.z});
    angle.insert(angle.end(), {0.0, std::numbers::pi / 2});
    feeds.insert(feeds.end(), {"X", "Y"});
  }
  const char* coordinates = "mount station_name telescope_name";
  arrays.push_back(strings("antenna_xds/antenna_name", names, {n}, {"antenna_name"}));
  arrays.push_back(strings("antenna_xds/mount", mounts, {n}, {"antenna_name"}));
  arrays.push_back(strings("antenna_xds/station_name", names, {n}, {"antenna_name"}));
  arrays.push_back(strings("antenna_xds/telescope_name", telescopes, {n}, {"antenna_name"}));
  arrays.push_back(
      strings("antenna_xds/receptor_label", {"pol_0", "pol_1"}, {2}, {"receptor_label"}));
  arrays.push_back(
      strings("antenna_xds/polarization_type", feeds, {n, 2}, {"antenna_name", "receptor_label"}));
  arrays.push_back(
      strings("antenna_xds/cartesian_pos_label", {"x", "y", "z"}, {3}, {"cartesian_pos_label"}));
  arrays.push_back(numbers("antenna_xds/ANTENNA_POSITION", position, {n, 3},
                           {"antenna_name", "cartesian_pos_label"},
                           {{"type", "location"},
                            {"units", "m"},
                            {"frame", "ITRS"},
                            {"coordinate_system", "geocentric"},
                            {"origin_object_name", "earth"},
                            {"coordinates", coordinates}}));
  arrays.push_back(numbers(
      "antenna_xds/ANTENNA_RECEPTOR_ANGLE", angle, {n, 2}, {"antenna_name", "receptor_label"},
      {{"type", "quantity"},
       {"units", "rad"},
       {"coordinates", "mount polarization_type station_name telescope_name"}}));
  arrays.push_back(numbers("antenna_xds/ANTENNA_DISH_DIAMETER", dish, {n}, {"antenna_name"},
                           {{"type", "quantity"}, {"units", "m"}, {"coordinates", coordinates}}));
}

// field_and_source_base_xds: the phase centre (ICRS; FK5 J2000 within
// 32 mas, as the ms back-end's FIELD says).
void add_field(const VisibilityLayout& l, std::vector<SmallArray>& arrays, json& groups) {
  groups["field_and_source_base_xds"] = group_doc({{"type", "field_and_source"}});
  const auto centre = telescope::phase_centre(*l.observation).icrs;
  const std::string g = "field_and_source_base_xds/";
  arrays.push_back(strings(g + "field_name", {kFieldName}, {1}, {"field_name"}));
  arrays.push_back(strings(g + "source_name", {kFieldName}, {1}, {"field_name"}));
  arrays.push_back(strings(g + "sky_dir_label", {"ra", "dec"}, {2}, {"sky_dir_label"}));
  arrays.push_back(numbers(
      g + "FIELD_PHASE_CENTER_DIRECTION", {centre.ra_rad, centre.dec_rad}, {1, 2},
      {"field_name", "sky_dir_label"},
      {{"type", "sky_coord"}, {"units", "rad"}, {"frame", "fk5"}, {"coordinates", "source_name"}}));
}

// The arrays written chunk by chunk: VISIBILITY's grid for it, FLAG and
// WEIGHT (their chunks mostly never written: the fill value), UVW.
json chunked_arrays(const VisibilityLayout& l, const Msv4Grid& g) {
  const std::vector<index_t> shape{g.times, g.baselines, g.channels, 1};
  const std::vector<index_t> chunk{g.chunk_times, 1, g.chunk_channels, 1};
  const std::vector<std::string> dims{"time", "baseline_id", "frequency", "polarization"};
  const std::string units = l.provenance ? l.provenance->vis_units : "uncalib";
  json a;
  a["VISIBILITY"] = array_doc(
      {shape,
       chunk,
       "complex64",
       {0.0, 0.0},
       dims,
       {{"type", "quantity"}, {"units", units}, {"coordinates", kVisibilityCoordinates}}});
  a["FLAG"] =
      array_doc({shape, chunk, "bool", false, dims, {{"coordinates", kVisibilityCoordinates}}});
  a["WEIGHT"] =
      array_doc({shape,
                 chunk,
                 "float32",
                 1.0,
                 dims,
                 {{"type", "quantity"}, {"units", ""}, {"coordinates", kVisibilityCoordinates}}});
  const auto uvw = uvw_chunk_shape(g.times, g.baselines);
  a["UVW"] = array_doc({{g.times, g.baselines, 3},
                        {uvw[0], uvw[1], uvw[2]},
                        "float64",
                        "NaN",
                        {"time", "baseline_id", "uvw_label"},
                        {{"type", "uvw"},
                         {"units", "m"},
                         {"frame", "fk5"},
                         {"coordinates", kVisibilityCoordinates}}});
  return a;
}

}  // namespace

std::array<index_t, 3> uvw_chunk_shape(index_t times, index_t baselines) {
  const index_t row = 3 * static_cast<index_t>(sizeof(double));
  const index_t chunk_times = std::clamp<index_t>(kUvwChunkBytes / row, 1, times);
  const index_t chunk_baselines =
      std::clamp<index_t>(kUvwChunkBytes / (row * chunk_times), 1, baselines);
  return {chunk_times, chunk_baselines, 3};
}

Msv4Nodes describe_msv4(const VisibilityLayout& layout, const Msv4Grid& grid) {
  Msv4Nodes n;
  n.attributes = group_attributes(layout);
  n.groups = json::object();
  add_coordinates(layout, n.arrays);
  add_antennas(layout, n.arrays, n.groups);
  add_field(layout, n.arrays, n.groups);
  n.chunked = chunked_arrays(layout, grid);
  return n;
}

nlohmann::json Msv4Nodes::group_doc() const {
  json nodes = json::object();
  // A sub-group's own consolidated metadata is empty: its nodes are listed
  // here, by their paths (zarr-python's flattened form).
  for (const auto& [path, doc] : groups.items()) {
    nodes[path] = doc;
    nodes[path]["consolidated_metadata"] = consolidated(json::object());
  }
  for (const auto& array : arrays) nodes[array.path] = array.doc;
  for (const auto& [path, doc] : chunked.items()) nodes[path] = doc;
  auto doc = msv4::group_doc(attributes);
  doc["consolidated_metadata"] = consolidated(nodes);
  return doc;
}

nlohmann::json processing_set_root(const std::vector<std::pair<std::string, json>>& msv4s) {
  json nodes = json::object();
  for (const auto& [name, group] : msv4s) {
    auto own = group;
    own["consolidated_metadata"] = consolidated(json::object());
    nodes[name] = own;
    for (const auto& [path, doc] : group.at("consolidated_metadata").at("metadata").items())
      nodes[name + "/" + path] = doc;
  }
  auto root = group_doc({{"type", "processing_set"}});
  root["consolidated_metadata"] = consolidated(nodes);
  return root;
}

}  // namespace iotest::storage::msv4
