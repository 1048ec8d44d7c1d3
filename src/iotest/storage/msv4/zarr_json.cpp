#include "iotest/storage/msv4/zarr_json.hpp"

#include <algorithm>

#include "iotest/storage/msv4/msv4_layout.hpp"

namespace iotest::storage::msv4 {

nlohmann::json array_doc(const ArraySpec& spec) {
  nlohmann::json d;
  d["zarr_format"] = 3;
  d["node_type"] = "array";
  d["shape"] = spec.shape;
  d["data_type"] = spec.data_type;
  d["chunk_grid"] = {{"name", "regular"}, {"configuration", {{"chunk_shape", spec.chunk_shape}}}};
  d["chunk_key_encoding"] = {{"name", "default"},
                             {"configuration", {{"separator", std::string(1, kChunkSeparator)}}}};
  d["fill_value"] = spec.fill_value;
  // bool and 1-byte types take no endianness; the rest are little-endian.
  nlohmann::json bytes_codec = {{"name", "bytes"}};
  if (spec.data_type != "bool") bytes_codec["configuration"] = {{"endian", "little"}};
  d["codecs"] = nlohmann::json::array({bytes_codec});
  d["attributes"] = spec.attributes;
  d["dimension_names"] = spec.dims;
  d["storage_transformers"] = nlohmann::json::array();
  return d;
}

nlohmann::json group_doc(const nlohmann::json& attributes) {
  return {{"zarr_format", 3}, {"node_type", "group"}, {"attributes", attributes}};
}

nlohmann::json consolidated(const nlohmann::json& nodes) {
  return {{"kind", "inline"}, {"must_understand", false}, {"metadata", nodes}};
}

namespace {

// UTF-8 to code points (iotest's names are ASCII; anything else is taken
// as it decodes, a malformed byte as itself).
std::u32string code_points(const std::string& text) {
  std::u32string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    char32_t cp = more == 0 ? c : c & (0x3F >> more);
    std::size_t j = 1;
    for (; j <= static_cast<std::size_t>(more) && i + j < text.size(); ++j)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + j]) & 0x3F);
    out.push_back(cp);
    i += j;
  }
  return out;
}

}  // namespace

Utf32Strings utf32_strings(const std::vector<std::string>& strings) {
  std::vector<std::u32string> points;
  std::size_t longest = 1;  // numpy's '<U1' for empty strings
  for (const auto& s : strings) {
    points.push_back(code_points(s));
    longest = std::max(longest, points.back().size());
  }
  Utf32Strings out;
  out.data_type = {{"name", "fixed_length_utf32"},
                   {"configuration", {{"length_bytes", 4 * longest}}}};
  std::vector<char32_t> cells(points.size() * longest, 0);
  for (std::size_t i = 0; i < points.size(); ++i)
    std::copy(points[i].begin(), points[i].end(), cells.begin() + static_cast<long>(i * longest));
  out.bytes = as_bytes(cells);
  return out;
}

SmallArray numbers(const std::string& path, const std::vector<double>& values,
                   std::vector<index_t> shape, std::vector<std::string> dims,
                   nlohmann::json attributes) {
  ArraySpec s{shape, shape, "float64", "NaN", std::move(dims), std::move(attributes)};
  return {path, array_doc(s), as_bytes(values)};
}

SmallArray integers(const std::string& path, const std::vector<std::int64_t>& values,
                    std::vector<std::string> dims) {
  const std::vector<index_t> shape{static_cast<index_t>(values.size())};
  ArraySpec s{shape, shape, "int64", 0, std::move(dims)};
  return {path, array_doc(s), as_bytes(values)};
}

SmallArray strings(const std::string& path, const std::vector<std::string>& values,
                   std::vector<index_t> shape, std::vector<std::string> dims,
                   nlohmann::json attributes) {
  auto encoded = utf32_strings(values);
  ArraySpec s{shape, shape, encoded.data_type, "", std::move(dims), std::move(attributes)};
  return {path, array_doc(s), std::move(encoded.bytes)};
}

nlohmann::json quantity(double value, const std::string& units, const std::string& type) {
  return {{"data", value},
          {"dims", nlohmann::json::array()},
          {"attrs", {{"units", units}, {"type", type}}}};
}

}  // namespace iotest::storage::msv4
