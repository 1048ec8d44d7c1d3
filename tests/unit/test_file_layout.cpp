// The output's file system in plain words and a CephFS layout
// (common/file_layout.hpp): the mount type's name and client, --file-layout's
// parsing, Ceph's values and the pool's replication from the ceph CLI's
// JSON, and, on this machine's file system (not CephFS), a layout that
// cannot be set or read. Setting and reading it on a real CephFS is
// tests/cluster/test_cephfs.py's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "iotest/common/errors.hpp"
#include "iotest/common/file_layout.hpp"
#include "iotest/storage/output/file_claim.hpp"

namespace iotest {
namespace {

TEST(FileSystemName, NamesTheFileSystemAndItsClient) {
  struct Case {
    const char *type, *name, *client;
  };
  for (const auto& c : {Case{"fuse.ceph-fuse", "ceph", "fuse"}, Case{"ceph", "ceph", "kernel"},
                        Case{"lustre", "lustre", "kernel"}, Case{"gpfs", "gpfs", "kernel"},
                        Case{"beegfs", "beegfs", "kernel"}, Case{"nfs", "nfs", "kernel"},
                        Case{"nfs4", "nfs", "kernel"}, Case{"fuse.glusterfs", "glusterfs", "fuse"},
                        Case{"ext4", "ext4", "kernel"}, Case{"tmpfs", "tmpfs", "kernel"},
                        Case{"fuseblk", "fuseblk", "fuse"}}) {
    EXPECT_EQ(file_system_name(c.type), c.name) << c.type;
    EXPECT_EQ(file_system_client(c.type), c.client) << c.type;
  }
}

TEST(FileLayoutRequest, TakesAnySubsetWithBinarySizes) {
  const auto l = parse_layout_request("object_size=4M,stripe_unit=1M,stripe_count=4,pool=fast");
  EXPECT_EQ(l, (FileLayout{4 << 20, 1 << 20, 4, "fast"}));
  EXPECT_EQ(parse_layout_request("stripe_count=8"), (FileLayout{0, 0, 8, ""}));
  EXPECT_EQ(parse_layout_request("stripe_unit=64k,object_size=1g"),
            (FileLayout{std::int64_t{1} << 30, 64 << 10, 0, ""}));
  EXPECT_EQ(parse_layout_request("object_size=8388608").object_size, 8 << 20);
  EXPECT_EQ(parse_layout_request("pool=cephfs_data").pool, "cephfs_data");
}

TEST(FileLayoutRequest, SaysItselfAsGivenAndAsCephTakesIt) {
  const auto l = parse_layout_request("stripe_count=4,object_size=8M,stripe_unit=1M");
  EXPECT_EQ(layout_request_text(l), "object_size=8M,stripe_unit=1M,stripe_count=4");
  EXPECT_EQ(ceph_layout_value(l), "object_size=8388608 stripe_unit=1048576 stripe_count=4");
  EXPECT_EQ(ceph_layout_value(parse_layout_request("pool=x,stripe_count=2")),
            "stripe_count=2 pool=x");
}

TEST(FileLayoutRequest, RefusesWhatItCannotMean) {
  for (const char* bad :
       {"", "object_size", "=4M", "object_size=", "object_size=4X", "object_size=-4M",
        "object_size=0", "stripe_count=4M", "stripe_count=1.5", "colour=blue",
        "stripe_count=2,stripe_count=4", "stripe_count=2,", ",stripe_count=2", "pool=", "pool=a b",
        "stripe_unit=100K", "object_size=1M,stripe_unit=4M", "object_size=99999999G"}) {
    try {
      parse_layout_request(bad);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), "--file-layout") << bad;
      EXPECT_EQ(e.one_line().find('\n'), std::string::npos) << e.one_line();
    }
  }
}

TEST(CephLayout, ParsesTheValuesCephGives) {
  EXPECT_EQ(parse_ceph_layout("4194304", "1048576", "4", "cephfs_data"),
            (FileLayout{4 << 20, 1 << 20, 4, "cephfs_data"}));
  EXPECT_EQ(parse_ceph_layout("4194304", "4194304", "1", "2")->pool, "2");  // a pool by id
  EXPECT_FALSE(parse_ceph_layout("", "4194304", "1", "cephfs_data"));
  EXPECT_FALSE(parse_ceph_layout("4194304", "4M", "1", "cephfs_data"));
  EXPECT_FALSE(parse_ceph_layout("4194304", "4194304", "0", "cephfs_data"));
  EXPECT_FALSE(parse_ceph_layout("4194304", "4194304", "1", ""));
}

TEST(CephLayout, ReadsThePoolsReplicationFromTheCli) {
  EXPECT_EQ(parse_pool_size(R"({"pool":"cephfs_data","pool_id":2,"size":2})"), 2);
  EXPECT_EQ(parse_pool_size("warning: something\n{\"pool\":\"x\",\"pool_id\":1,\"size\":3}\n"), 3);
  EXPECT_FALSE(parse_pool_size("Error ENOENT: unrecognized pool 'x'"));
  EXPECT_FALSE(parse_pool_size(R"({"pool":"x","pool_id":1})"));
  EXPECT_FALSE(parse_pool_size(R"({"size":"two"})"));
  EXPECT_FALSE(parse_pool_size(R"({"size":0})"));
}

// On this machine's file system (ext4 or tmpfs, never CephFS): nothing to
// read, and a claim's layout not set, said in one line naming it.
TEST(CephLayout, ElsewhereNothingIsReadOrSet) {
  namespace fs = std::filesystem;
  const auto dir = fs::path(::testing::TempDir()) / ("iotest_layout_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_FALSE(read_file_layout(dir.string()));
  EXPECT_FALSE(read_file_layout((dir / "missing").string()));
  const auto request = parse_layout_request("object_size=8M,stripe_count=2");
  for (const bool folder : {false, true}) {
    storage::FileClaim claim((dir / (folder ? "out.ms" : "out.h5")).string(), 7, "OUTPUT", folder);
    const std::string why = claim.set_layout(request);
    EXPECT_NE(why.find(folder ? "has no ceph.dir.layout" : "has no ceph.file.layout"),
              std::string::npos)
        << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    EXPECT_FALSE(read_file_layout(claim.partial()));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace iotest
