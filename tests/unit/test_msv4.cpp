// The MSv4 layout's pieces (storage/msv4/): where an iotest chunk lies in
// zarr's chunk grid and back, the chunk keys, the strings zarr's
// fixed_length_utf32 holds, the set's names, and the root's consolidated
// metadata. Whole processing sets are checked by xradio and zarr-python
// (tests/cli/test_msv4.py).
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "iotest/storage/msv4/msv4_layout.hpp"
#include "iotest/storage/msv4/msv4_nodes.hpp"
#include "iotest/storage/msv4/zarr_json.hpp"

namespace iotest::storage::msv4 {
namespace {

// 5 baselines x 8 times in chunks of 4, 10 channels in chunks of 4, the
// second file of two (frequency chunks 2 and 3 of 0-3: channels 8-9 and a
// padded chunk past them).
VisibilityLayout file_layout() {
  VisibilityLayout l;
  l.baselines = 5, l.times = 8, l.channels = 14;
  l.time_chunk = 4, l.freq_chunk = 4;
  FileSplit split{FileSplit::By::frequency, 2, l.freq_chunks()};
  return split.layout_of_file(l, 1);
}

TEST(Msv4Grid, EveryIotestChunkIsOneZarrChunkAndBack) {
  const auto l = file_layout();
  const auto g = grid_of(l);
  EXPECT_EQ(g.channels, 6);  // channels 8 to 13
  EXPECT_EQ(g.first_freq_chunk, 2);
  std::set<std::array<index_t, 4>> seen;
  for (index_t rc = 0; rc < l.row_chunks(); ++rc)
    for (index_t fc = l.first_freq_chunk; fc < l.file_freq_chunk_end(); ++fc) {
      const auto at = g.chunk_of({rc, fc});
      // Row chunk rc holds rows 4rc to 4rc + 3: baseline rc / 2, times 4 (rc % 2) on.
      EXPECT_EQ(at[0], rc % 2);
      EXPECT_EQ(at[1], rc / 2);
      EXPECT_EQ(at[2], fc - 2);
      EXPECT_EQ(at[3], 0);
      const auto back = g.key_of(at[0], at[1], at[2]);
      EXPECT_EQ(back.row_chunk, rc);
      EXPECT_EQ(back.freq_chunk, fc);
      EXPECT_TRUE(seen.insert(at).second);
    }
  EXPECT_EQ(seen.size(), 10U * 2);
}

TEST(Msv4Grid, ATimeChunkMustDivideTheSteps) {
  EXPECT_EQ(time_chunk_problem(32, 16), "");
  EXPECT_EQ(time_chunk_problem(32, 32), "");
  const auto why = time_chunk_problem(30, 16);
  EXPECT_NE(why.find("divides the 30 time steps, got 16"), std::string::npos) << why;
  auto l = file_layout();
  l.times = 6;  // chunks of 4 run across baselines
  EXPECT_THROW(grid_of(l), std::logic_error);
}

TEST(Msv4Keys, ChunkKeysUseDotsAndParseBack) {
  EXPECT_EQ(chunk_key("vis_0/VISIBILITY", std::array<index_t, 4>{1, 20, 3, 0}),
            "vis_0/VISIBILITY/c.1.20.3.0");
  EXPECT_EQ(chunk_key("vis_0/UVW", std::vector<index_t>{0, 7, 0}), "vis_0/UVW/c.0.7.0");
  std::array<index_t, 4> index{};
  ASSERT_TRUE(parse_chunk_key("c.1.20.3.0", index));
  EXPECT_EQ(index, (std::array<index_t, 4>{1, 20, 3, 0}));
  for (const char* bad : {"c.1.20.3", "c.1.20.3.0.0", "c/1/20/3/0", "c.1.x.3.0", "zarr.json",
                          "c.1.20.3.0.tmp", "c..20.3.0", "c.-1.2.3.0"})
    EXPECT_FALSE(parse_chunk_key(bad, index)) << bad;
}

TEST(Msv4Names, AnMsv4IsNamedAfterItsSet) {
  EXPECT_EQ(set_stem("out/vis.ps.zarr"), "vis");
  EXPECT_EQ(set_stem("out/vis.ps.zarr/"), "vis");
  EXPECT_EQ(set_stem("s3://bucket/run/obs.zarr"), "obs");
  EXPECT_EQ(set_stem("out/vis.ps.zarr.run-123.partial"), "vis");  // a set being written
  EXPECT_EQ(msv4_name("vis", 3), "vis_3");
}

TEST(ZarrJson, StringsAreFixedLengthUtf32) {
  const auto s = utf32_strings({"XX", "", "Ü"});
  EXPECT_EQ(s.data_type["name"], "fixed_length_utf32");
  EXPECT_EQ(s.data_type["configuration"]["length_bytes"], 8);  // the longest, 2 code points
  ASSERT_EQ(s.bytes.size(), 3U * 8);
  std::vector<char32_t> cells(6);
  std::memcpy(cells.data(), s.bytes.data(), s.bytes.size());
  EXPECT_EQ(cells, (std::vector<char32_t>{U'X', U'X', 0, 0, U'Ü', 0}));
  // All empty: numpy's '<U1', one code point of zeros each.
  EXPECT_EQ(utf32_strings({"", ""}).data_type["configuration"]["length_bytes"], 4);
}

TEST(ZarrJson, AnArrayIsRawLittleEndianChunks) {
  const auto doc = array_doc({{8, 5}, {4, 1}, "float32", 1.0, {"time", "baseline_id"}});
  EXPECT_EQ(doc["zarr_format"], 3);
  EXPECT_EQ(doc["node_type"], "array");
  EXPECT_EQ(doc["chunk_grid"]["configuration"]["chunk_shape"], nlohmann::json({4, 1}));
  EXPECT_EQ(doc["chunk_key_encoding"]["configuration"]["separator"], ".");
  EXPECT_EQ(doc["codecs"],
            nlohmann::json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}])"));
  EXPECT_EQ(array_doc({{3}, {3}, "bool", false, {"x"}})["codecs"],
            nlohmann::json::parse(R"([{"name": "bytes"}])"));  // one byte: no endianness
}

TEST(ZarrJson, TheRootConsolidatesEveryMsv4sNodesByTheirPaths) {
  nlohmann::json group = group_doc({{"type", "visibility"}});
  group["consolidated_metadata"] = consolidated({{"VISIBILITY", {{"node_type", "array"}}},
                                                 {"antenna_xds", group_doc({{"type", "antenna"}})},
                                                 {"antenna_xds/mount", {{"node_type", "array"}}}});
  const auto root = processing_set_root({{"vis_0", group}, {"vis_1", group}});
  EXPECT_EQ(root["attributes"]["type"], "processing_set");
  const auto& nodes = root["consolidated_metadata"]["metadata"];
  EXPECT_EQ(nodes.size(), 8U);
  EXPECT_EQ(nodes["vis_1/antenna_xds/mount"]["node_type"], "array");
  // A group's own listing is the root's: empty under it.
  EXPECT_TRUE(nodes["vis_0"]["consolidated_metadata"]["metadata"].empty());
  EXPECT_EQ(nodes["vis_0"]["attributes"]["type"], "visibility");
}

TEST(Msv4Nodes, UvwChunksHoldAboutFourMebibytes) {
  EXPECT_EQ(uvw_chunk_shape(32, 351), (std::array<index_t, 3>{32, 351, 3}));  // all of it
  const auto big = uvw_chunk_shape(1000, 130000);
  EXPECT_EQ(big[0], 1000);
  EXPECT_EQ(big[1], kUvwChunkBytes / (24 * 1000));
  EXPECT_LE(big[0] * big[1] * 24, kUvwChunkBytes);
}

}  // namespace
}  // namespace iotest::storage::msv4
