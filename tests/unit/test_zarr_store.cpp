// The zarr stores (storage/msv4/zarr_store.hpp): a folder store in a
// scratch folder (keys as files, nested folders made, listings, removal, a
// file in the way, counts), and a bucket store's failures, against a port
// nothing answers on. (A bucket store's requests are the S3 client's,
// which test_s3_client.cpp checks against its fake store.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/msv4/zarr_store.hpp"

namespace iotest::storage::msv4 {
namespace {

namespace fs = std::filesystem;

Bytes bytes_of(const std::string& text) {
  Bytes bytes(text.size());
  std::transform(text.begin(), text.end(), bytes.begin(), [](char c) { return std::byte(c); });
  return bytes;
}

// n bytes counting up from `first` (mod 256), so a shifted or cut copy shows.
Bytes counting(std::size_t n, int first = 0) {
  Bytes bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = std::byte((first + i) & 0xff);
  return bytes;
}

std::vector<std::string> sorted(std::vector<std::string> keys) {
  std::sort(keys.begin(), keys.end());
  return keys;
}

// A scratch folder of its own for each test; the store's root is a folder
// in it, not yet made.
class FolderStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "iotest-zarr-store-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    scratch_ = pattern;
    root_ = (scratch_ / "vis.ps.zarr").string();
  }
  void TearDown() override { fs::remove_all(scratch_); }

  fs::path scratch_;
  std::string root_;
};

TEST_F(FolderStoreTest, KeysComeBackAsPutNestedOrNot) {
  const auto store = folder_store(root_ + "/", 2);  // the '/' at the end is dropped
  EXPECT_EQ(store->root(), root_);
  EXPECT_TRUE(fs::is_directory(root_));  // made at once
  const std::string chunk = "vis_0/VISIBILITY/c/0/3/1/0";
  store->put("zarr.json", bytes_of(R"({"zarr_format":3})"));
  store->put(chunk, counting(100000, 7));
  store->put("vis_0/iotest/empty", Bytes{});
  // Seen before any flush: the files are written before put returns.
  EXPECT_EQ(store->get("zarr.json"), bytes_of(R"({"zarr_format":3})"));
  EXPECT_EQ(store->get(chunk), counting(100000, 7));
  EXPECT_EQ(store->get("vis_0/iotest/empty"), Bytes{});
  store->put(chunk, counting(10, 1));  // replaced, and shorter: no old bytes left
  store->flush();
  EXPECT_EQ(store->get(chunk), counting(10, 1));
  EXPECT_EQ(fs::file_size(root_ + "/" + chunk), 10u);  // a plain file where zarr expects it
}

// Whole pages from a page-aligned buffer go past the page cache on a local
// file system (O_DIRECT), the rest through it: each comes back as put, and
// a key put again shorter is only what was put last.
TEST_F(FolderStoreTest, AChunkFromAnAlignedBufferComesBackAsPutWhateverItsPages) {
  const auto store = folder_store(root_, 4);
  constexpr std::size_t kPage = 4096;
  std::unique_ptr<std::byte[], void (*)(void*)> aligned(
      static_cast<std::byte*>(std::aligned_alloc(kPage, 4 * kPage)), &std::free);
  for (std::size_t i = 0; i < 4 * kPage; ++i) aligned[i] = static_cast<std::byte>(i * 7 + 1);
  const auto put = [&](const std::string& key, std::size_t offset, std::size_t size) {
    store->put_copy(key, std::span<const std::byte>(aligned.get() + offset, size));
    return Bytes(aligned.get() + offset, aligned.get() + offset + size);
  };
  const std::vector<std::tuple<std::string, std::size_t, std::size_t>> cases = {
      {"vis_0/VISIBILITY/c.0.0.0.0", 0, 4 * kPage},  // whole pages, aligned
      {"vis_0/VISIBILITY/c.1.0.0.0", 1, 2 * kPage},  // whole pages, not aligned
      {"vis_0/VISIBILITY/c.2.0.0.0", 0, kPage + 8},  // aligned, a page and a bit
  };
  for (const auto& [key, offset, size] : cases) EXPECT_EQ(store->get(key), put(key, offset, size));
  // Put again shorter: the file is cut to it.
  const auto again = put("vis_0/VISIBILITY/c.0.0.0.0", 0, kPage);
  store->flush();
  EXPECT_EQ(store->get("vis_0/VISIBILITY/c.0.0.0.0"), again);
  EXPECT_EQ(fs::file_size(root_ + "/vis_0/VISIBILITY/c.0.0.0.0"), kPage);
}

TEST_F(FolderStoreTest, AMissingKeyIsNothing) {
  const auto store = folder_store(root_);
  store->put("vis_0/zarr.json", bytes_of("{}"));
  EXPECT_EQ(store->get("zarr.json"), std::nullopt);
  EXPECT_EQ(store->get("vis_1/zarr.json"), std::nullopt);                 // no such folder
  EXPECT_EQ(store->get("vis_0/zarr.json/x"), std::nullopt);               // a file, not a folder
  EXPECT_EQ(store->get("vis_0"), std::nullopt);                           // a folder is no key
  EXPECT_EQ(store->get("../vis.ps.zarr/vis_0/zarr.json"), std::nullopt);  // never outside
}

TEST_F(FolderStoreTest, AListingHasExactlyTheKeysUnderItsPrefix) {
  const auto store = folder_store(root_);
  const std::vector<std::string> chunks = {
      "vis_0/VISIBILITY/c/0/0/0/0", "vis_0/VISIBILITY/c/0/1/0/0", "vis_0/VISIBILITY/c/1/0/0/0"};
  for (const auto& key : chunks) store->put(key, counting(16));
  for (const std::string key :
       {"vis_0/VISIBILITY/zarr.json", "vis_0/zarr.json", "vis_01/zarr.json", "zarr.json"})
    store->put(key, bytes_of("{}"));
  EXPECT_EQ(sorted(store->list("vis_0/VISIBILITY/c/")), chunks);
  EXPECT_EQ(sorted(store->list("vis_0/VISIBILITY/c")), chunks);  // the '/' is implied
  const std::vector<std::string> vis_0 = {
      "vis_0/VISIBILITY/c/0/0/0/0", "vis_0/VISIBILITY/c/0/1/0/0", "vis_0/VISIBILITY/c/1/0/0/0",
      "vis_0/VISIBILITY/zarr.json", "vis_0/zarr.json"};
  EXPECT_EQ(sorted(store->list("vis_0")), vis_0);  // a folder: not vis_01's
  EXPECT_EQ(store->list("").size(), 7u);
  EXPECT_EQ(sorted(store->list("vis_01/")), std::vector<std::string>{"vis_01/zarr.json"});
  EXPECT_TRUE(store->list("vis_2/").empty());
  EXPECT_TRUE(store->list("zarr.json").empty());  // a key, not a folder
  EXPECT_TRUE(store->list("..").empty());
}

TEST_F(FolderStoreTest, StatsCountEveryPutAndTheFlush) {
  const auto store = folder_store(root_, 1);  // one slot: each put waits for the last's sync
  // A local file system's (one syncfs at flush), or any other's.
  EXPECT_TRUE(store->durability() ==
                  "each file written back as it is written (O_DIRECT where whole pages), then "
                  "syncfs of its file system" ||
              store->durability() == "fsync of every file and folder")
      << store->durability();
  std::int64_t bytes = 0;
  for (int i = 0; i < 40; ++i) {
    const auto size = static_cast<std::size_t>(1000 * i);
    store->put("vis_0/FLAG/c/" + std::to_string(i % 4) + "/" + std::to_string(i), counting(size));
    bytes += static_cast<std::int64_t>(size);
  }
  EXPECT_EQ(store->stats().keys_written, 40);
  EXPECT_EQ(store->stats().bytes_written, bytes);
  EXPECT_GT(store->stats().put_s, 0);
  EXPECT_EQ(store->stats().flush_s, 0);
  EXPECT_EQ(store->held_bytes(), 0);  // nothing kept in memory
  store->flush();
  EXPECT_GT(store->stats().flush_s, 0);
  store->flush();  // nothing new: no failure
  EXPECT_EQ(store->stats().keys_written, 40);
  EXPECT_EQ(store->list("vis_0/FLAG/c/").size(), 40u);
  EXPECT_EQ(store->get("vis_0/FLAG/c/3/39"), counting(39000));
}

TEST_F(FolderStoreTest, RemovalTakesOnlyItsPrefix) {
  const auto store = folder_store(root_);
  for (const std::string key : {"vis_0/a", "vis_0/b/c", "vis_01/a", "zarr.json"})
    store->put(key, bytes_of(key));
  fs::create_directories(scratch_ / "beside");  // outside the store: never touched
  store->remove_all("vis_0");
  EXPECT_EQ(sorted(store->list("")), (std::vector<std::string>{"vis_01/a", "zarr.json"}));
  EXPECT_FALSE(fs::exists(root_ + "/vis_0"));
  store->remove_all("../beside");
  store->remove_all("zarr.json");  // a key, not a folder: nothing under it
  EXPECT_TRUE(fs::exists(scratch_ / "beside"));
  EXPECT_EQ(store->get("zarr.json"), bytes_of("zarr.json"));
  // Its folders made again after the removal, and synced.
  store->put("vis_0/b/c", bytes_of("again"));
  store->flush();
  EXPECT_EQ(store->get("vis_0/b/c"), bytes_of("again"));
  store->remove_all("");
  EXPECT_TRUE(store->list("").empty());
  EXPECT_TRUE(fs::is_directory(root_));  // the root stays
  EXPECT_TRUE(fs::exists(scratch_ / "beside"));
  store->flush();
}

TEST_F(FolderStoreTest, AStoreNeedsItsParentFolderAndAFolder) {
  EXPECT_THROW(folder_store((scratch_ / "missing" / "vis.ps.zarr").string()), std::runtime_error);
  EXPECT_FALSE(fs::exists(scratch_ / "missing"));
  std::ofstream(scratch_ / "a_file") << "x";
  EXPECT_THROW(folder_store((scratch_ / "a_file").string()), std::runtime_error);
  EXPECT_THROW(folder_store(root_, 0), std::invalid_argument);
  fs::create_directories(root_);
  std::ofstream(root_ + "/kept") << "x";
  const auto store = folder_store(root_);  // an existing folder is taken as it is
  EXPECT_EQ(store->list(""), std::vector<std::string>{"kept"});
}

// As root ignores permissions, a file where a folder must be is what
// makes a put fail here.
TEST_F(FolderStoreTest, APutWhereAFileIsInTheWayFails) {
  const auto store = folder_store(root_);
  store->put("a", bytes_of("a file"));
  try {
    store->put("a/b", bytes_of("under a file"));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find(root_ + "/a/b"), std::string::npos) << what;
    EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
  }
  EXPECT_THROW(store->put("a/b/c", bytes_of("deeper")), std::runtime_error);
  EXPECT_EQ(store->get("a"), bytes_of("a file"));
  EXPECT_EQ(store->stats().keys_written, 1);
  store->flush();  // the failed puts left nothing to sync
}

TEST_F(FolderStoreTest, KeysOutsideTheRootAreRefused) {
  const auto store = folder_store(root_);
  for (const std::string key : {"", "/etc/x", "../x", "a/../../x", "a//b", "./a", "a/"})
    EXPECT_THROW(store->put(key, bytes_of("x")), std::invalid_argument) << key;
  EXPECT_TRUE(store->list("").empty());
  EXPECT_FALSE(fs::exists(scratch_ / "x"));
}

TEST_F(FolderStoreTest, APlaceIsAFolderUnlessAnS3Url) {
  EXPECT_EQ(zarr_store_at(root_)->root(), root_);
  EXPECT_TRUE(fs::is_directory(root_));
  // A bucket store, which refuses a bucket without a prefix before asking
  // for its configuration.
  EXPECT_THROW(zarr_store_at("s3://ska-vis"), UsageError);
  EXPECT_THROW(zarr_store_at("s3://Not_A_Bucket/vis.ps.zarr"), UsageError);
}

// The process's environment set for a test, and as it was after it.
class ScopedEnvironment {
 public:
  void set(const char* name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* was = std::getenv(name);
      saved_[name] = was ? std::optional<std::string>(was) : std::nullopt;
    }
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A bucket store on a port bound and not listening: every request refused
// (and retried, as the client does: a few seconds).
TEST_F(FolderStoreTest, ABucketStoresFailedPutIsThrownByTheNextFlush) {
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(probe, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ScopedEnvironment env;
  env.set("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)));
  env.set("AWS_ACCESS_KEY_ID", "AKIDTEST");
  env.set("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
  env.set("AWS_REGION", "us-east-1");
  env.set("AWS_PROFILE", std::nullopt);
  env.set("AWS_CA_BUNDLE", std::nullopt);
  // No files of this machine's own set-up read.
  env.set("AWS_SHARED_CREDENTIALS_FILE", (scratch_ / "credentials").string());
  env.set("AWS_CONFIG_FILE", (scratch_ / "config").string());
  {
    const auto store = zarr_store_at("s3://ska-vis/runs/vis.ps.zarr/", 2);
    EXPECT_EQ(store->root(), "s3://ska-vis/runs/vis.ps.zarr");
    EXPECT_EQ(store->durability(), "each object acknowledged by the store");
    store->put("zarr.json", counting(300));  // queued: returns at once
    store->put("vis_0/zarr.json", counting(100));
    EXPECT_EQ(store->stats().keys_written, 2);
    EXPECT_EQ(store->stats().bytes_written, 400);
    EXPECT_EQ(store->held_bytes(), 2 * 300);  // in_flight puts of the largest so far
    try {
      store->flush();
      ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find("s3://ska-vis/runs/vis.ps.zarr/"), std::string::npos) << what;
      EXPECT_EQ(what.find("EXAMPLEKEY"), std::string::npos) << what;
    }
    EXPECT_THROW(store->put("zarr.json", counting(1)), std::runtime_error);  // it stays failed
    store->remove_all("");  // an abort's: its listing fails, and is not thrown
  }
  close(probe);
}

}  // namespace
}  // namespace iotest::storage::msv4
