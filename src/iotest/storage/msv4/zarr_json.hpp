// Zarr format 3's metadata (zarr.json) and the bytes of small arrays, as
// iotest writes them: raw little-endian chunks (the "bytes" codec alone,
// no compressor: the rate is the storage's), C order, the default chunk
// key encoding with '/'. No C or C++ library writes zarr (Debian, PyPI),
// so these few documents are built here and checked by zarr-python and
// xradio in the tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/storage/msv4/zarr_store.hpp"

namespace iotest::storage::msv4 {

// One array's zarr.json: `data_type` a name ("complex64") or an object
// (fixed_length_utf32's), `dims` its dimension_names.
struct ArraySpec {
  std::vector<index_t> shape, chunk_shape;
  nlohmann::json data_type;
  nlohmann::json fill_value;
  std::vector<std::string> dims;
  nlohmann::json attributes = nlohmann::json::object();
};
nlohmann::json array_doc(const ArraySpec& spec);
nlohmann::json group_doc(const nlohmann::json& attributes);

// A group's consolidated metadata (zarr-python's "inline" kind): `nodes`,
// keyed by their paths under the group, each its own zarr.json.
nlohmann::json consolidated(const nlohmann::json& nodes);

// Strings as zarr's fixed_length_utf32 (numpy's '<U'): each of the longest
// one's code points, 4 bytes each, little-endian, zero-padded. (xradio's
// schema takes no variable-length strings.)
struct Utf32Strings {
  nlohmann::json data_type;
  Bytes bytes;
};
Utf32Strings utf32_strings(const std::vector<std::string>& strings);

// Values as little-endian bytes (the machines iotest runs on are).
template <typename T>
Bytes as_bytes(const std::vector<T>& values) {
  Bytes b(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(b.data(), values.data(), b.size());
  return b;
}

// A small array written whole, in one chunk: its metadata and its bytes.
struct SmallArray {
  std::string path;  // under its MSv4 group: "time", "antenna_xds/mount"
  nlohmann::json doc;
  Bytes bytes;
};
SmallArray numbers(const std::string& path, const std::vector<double>& values,
                   std::vector<index_t> shape, std::vector<std::string> dims,
                   nlohmann::json attributes = nlohmann::json::object());
SmallArray integers(const std::string& path, const std::vector<std::int64_t>& values,
                    std::vector<std::string> dims);
SmallArray strings(const std::string& path, const std::vector<std::string>& values,
                   std::vector<index_t> shape, std::vector<std::string> dims,
                   nlohmann::json attributes = nlohmann::json::object());

// A quantity as xradio keeps one in an attribute: {"data", "dims", "attrs"}.
nlohmann::json quantity(double value, const std::string& units,
                        const std::string& type = "quantity");

}  // namespace iotest::storage::msv4
