// Storage back-ends: the null back-end counts chunks, unknown names are usage
// errors, and the HDF5 back-end leaves nothing behind when aborted.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "iotest/commands/verify.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/chunk_assembler.hpp"

namespace iotest::storage {
namespace {

telescope::Observation small_observation() {
  return telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/16/8", -40.0});
}

// 351 baselines x 8 times in chunks of 4, 16 channels in chunks of 8.
TEST(Storage, NullBackendCountsChunksAndRewrites) {
  const auto obs = small_observation();
  auto backend = make_backend("null");
  backend->open("", layout_of(obs));
  const std::vector<cplx> data(32);
  backend->write_chunk({0, 0}, data.data(), 5);
  backend->write_chunk({0, 0}, data.data(), 3);  // the same chunk again: a rewrite
  backend->write_chunk({701, 1}, data.data(), 32);
  backend->close();
  EXPECT_EQ(backend->stats().chunk_writes, 3);
  EXPECT_EQ(backend->stats().chunks_written, 2);
  EXPECT_EQ(backend->stats().chunks_rewritten, 1);
  EXPECT_EQ(backend->stats().bytes, 3 * 32 * 16);
  EXPECT_EQ(backend->stats().visibilities, 40);
  EXPECT_THROW(backend->write_chunk({702, 0}, data.data(), 1), std::logic_error);
}

// Runs of one row chunk come out as whole chunks, each value in its place;
// moving to the next row chunk emits the previous one.
TEST(Storage, ChunkAssemblerPlacesRunsInChunks) {
  const auto obs = small_observation();
  const auto layout = layout_of(obs);
  ChunkAssembler chunks(layout);
  std::vector<std::pair<ChunkKey, std::vector<cplx>>> out;
  const auto emit = [&](const ChunkKey& key, const cplx* data, index_t count) {
    out.emplace_back(key, std::vector<cplx>(data, data + 32));
    EXPECT_GT(count, 0);
  };
  const std::vector<cplx> vis = {{1, 0}, {2, 0}, {3, 0}};
  chunks.add(9, 6, 2, vis.data(), emit);      // row 9 (baseline 1, time 1), channels 6-7
  chunks.add(10, 8, 3, vis.data(), emit);     // row 10, channels 8-10: frequency chunk 1
  EXPECT_TRUE(out.empty());
  chunks.add(12, 0, 1, vis.data(), emit);     // row chunk 3: chunk (2, *) are done
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first.row_chunk, 2);
  EXPECT_EQ(out[0].first.freq_chunk, 0);
  EXPECT_EQ(out[0].second[1 * 8 + 6], cplx(1, 0));
  EXPECT_EQ(out[0].second[1 * 8 + 7], cplx(2, 0));
  EXPECT_EQ(out[1].first.freq_chunk, 1);
  EXPECT_EQ(out[1].second[2 * 8 + 2], cplx(3, 0));
  EXPECT_EQ(out[1].second[0], cplx(0, 0));
  chunks.flush(emit);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].first.row_chunk, 3);
  EXPECT_THROW(chunks.add(9, 7, 2, vis.data(), emit), std::logic_error);  // crosses channel 8
}

TEST(Storage, UnknownBackendIsAUsageError) {
  EXPECT_THROW(make_backend("tape"), UsageError);
}

TEST(Storage, AbortedHdf5OutputLeavesNoFile) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_abort";
  std::filesystem::create_directories(dir);
  {
    auto backend = make_backend("hdf5");
    backend->open((dir / "vis.h5").string(), layout_of(obs));
    const std::vector<cplx> data(32, cplx(1, 2));
    backend->write_chunk({0, 0}, data.data(), 32);
    EXPECT_TRUE(std::filesystem::exists(dir / "vis.h5.partial"));
    backend->abort();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST(Storage, VerifyFindsMissingChunks) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_missing";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "vis.h5").string();
  {
    auto backend = make_backend("hdf5");
    auto layout = layout_of(obs);
    layout.provenance = Provenance{"T05_", 1e-5, 3, 1};
    backend->open(path, layout);
    const std::vector<cplx> data(32, cplx(1, 2));
    backend->write_chunk({0, 0}, data.data(), 32);  // one chunk of 351 x 2 x 2
    backend->close();
  }
  commands::VerifyOptions o;
  o.files = {path};
  const auto r = commands::verify(o);
  EXPECT_FALSE(r.verification->passed);
  EXPECT_EQ(r.verification->chunks_present, 1);
  EXPECT_EQ(r.verification->chunks_expected, 351 * 2 * 2);
  EXPECT_NE(r.verification->reason.find("chunks missing"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace iotest::storage
