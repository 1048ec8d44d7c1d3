// Storage back-ends: the null back-end counts chunks, unknown names are usage
// errors, and the HDF5 back-end leaves nothing behind when aborted.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "iotest/commands/verify.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"

namespace iotest::storage {
namespace {

telescope::Observation small_observation() {
  return telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/16/8", -40.0});
}

TEST(Storage, NullBackendCountsBytesAndChunks) {
  const auto obs = small_observation();
  auto backend = make_backend("null");
  backend->open("", layout_of(obs));
  const std::vector<cplx> data(16);
  backend->write(0, 0, 1, 0, 8, data.data());  // chunk (0, 0, 0)
  backend->write(0, 1, 1, 0, 8, data.data());  // the same chunk again
  backend->write(3, 5, 1, 4, 8, data.data());  // two frequency chunks
  backend->close();
  EXPECT_EQ(backend->stats().writes, 3);
  EXPECT_EQ(backend->stats().bytes, 24 * 16);
  EXPECT_EQ(backend->stats().chunks_touched, 3);
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
    const std::vector<cplx> data(8, cplx(1, 2));
    backend->write(0, 0, 1, 0, 8, data.data());
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
    const std::vector<cplx> data(8, cplx(1, 2));
    backend->write(0, 0, 1, 0, 8, data.data());  // one chunk of 351 x 2 x 2
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
