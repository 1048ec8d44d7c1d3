// One MSv4's zarr nodes as iotest writes them (msv4_layout.hpp): the
// group's attributes, the coordinates and sub-datasets written whole at
// open, and the metadata of the arrays written chunk by chunk (VISIBILITY,
// FLAG, WEIGHT) or at open in chunks (UVW). What xradio 1.3's schema
// requires, and nothing it leaves optional that would cost a rate
// (EFFECTIVE_INTEGRATION_TIME, TIME_CENTROID: 16 bytes a row).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "iotest/storage/backend.hpp"
#include "iotest/storage/msv4/msv4_layout.hpp"
#include "iotest/storage/msv4/zarr_json.hpp"

namespace iotest::storage::msv4 {

struct Msv4Nodes {
  nlohmann::json attributes;       // the MSv4 group's
  nlohmann::json groups;           // sub-group path -> its zarr.json (antenna_xds, ...)
  std::vector<SmallArray> arrays;  // written whole at open
  nlohmann::json chunked;          // path -> zarr.json: VISIBILITY, FLAG, WEIGHT, UVW
  // The MSv4 group's zarr.json, with every node's metadata consolidated
  // (zarr-python's inline kind), as written at the writer's close.
  nlohmann::json group_doc() const;
};

// `layout`: the file's (its frequency range, file index and count).
Msv4Nodes describe_msv4(const VisibilityLayout& layout, const Msv4Grid& grid);

// UVW's chunk shape (times, baselines, 3): about kUvwChunkBytes a chunk.
std::array<index_t, 3> uvw_chunk_shape(index_t times, index_t baselines);

// The processing set's root zarr.json from its MSv4 groups' (name ->
// group_doc()): their nodes consolidated under the root, as zarr-python's
// consolidate_metadata leaves them.
nlohmann::json processing_set_root(
    const std::vector<std::pair<std::string, nlohmann::json>>& msv4s);

}  // namespace iotest::storage::msv4
