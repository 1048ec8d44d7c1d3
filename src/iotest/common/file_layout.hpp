// The file system an output lies on, in plain words, and a file's layout
// there: how a parallel file system cuts the file into objects and spreads
// them over its storage servers (docs/storage.md, "Shared file systems:
// file layout"). A figure of a shared file system means little without
// them: the same bytes striped over one server or eight are two
// benchmarks.
//
// Only CephFS lets a client read and set a layout through plain xattr
// calls (its virtual attributes ceph.file.layout and ceph.dir.layout);
// Lustre's stripes are set on the output folder with `lfs setstripe`
// before the run. The parsing of Ceph's values is apart from the calls,
// so it is tested without a Ceph cluster.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace iotest {

// The file system a mount type (/proc/self/mountinfo) names: "ceph" for
// both the kernel's client ("ceph") and ceph-fuse ("fuse.ceph-fuse"),
// "nfs" for nfs4, "glusterfs" for fuse.glusterfs, the type itself
// otherwise (lustre, gpfs, beegfs, ext4, xfs, tmpfs, ...).
std::string file_system_name(const std::string& mount_type);
// How this host reaches it: "fuse" (a FUSE mount: fuse.*, fuse, fuseblk)
// or "kernel".
std::string file_system_client(const std::string& mount_type);

// A CephFS layout (bytes, and the RADOS pool's name). As a request
// (--file-layout) any subset: 0 and "" are fields not given.
struct FileLayout {
  std::int64_t object_size = 0, stripe_unit = 0, stripe_count = 0;
  std::string pool;
  bool operator==(const FileLayout&) const = default;
};

// --file-layout's value: "object_size=4M,stripe_unit=1M,stripe_count=4,
// pool=NAME", any subset in any order, sizes in bytes or with a binary
// suffix K, M, G. UsageError naming `option` and what was expected.
// Checked as Ceph checks a layout: a stripe unit a multiple of 64 KiB and
// dividing the object size, where both are given.
FileLayout parse_layout_request(const std::string& text,
                                const std::string& option = "--file-layout");
// The request as the option takes it ("object_size=4M,stripe_count=4").
std::string layout_request_text(const FileLayout& request);
// The value of Ceph's whole-layout attribute for the fields given:
// "stripe_unit=1048576 stripe_count=4 object_size=4194304 pool=x" (one
// setxattr, so the fields are checked together, not one at a time
// against the others' old values).
std::string ceph_layout_value(const FileLayout& request);

// A layout from the four values Ceph gives (ceph.file.layout.object_size,
// .stripe_unit, .stripe_count: decimal; .pool: a name, or an id for a
// pool just made); nothing where one is missing or not a positive number.
std::optional<FileLayout> parse_ceph_layout(const std::string& object_size,
                                            const std::string& stripe_unit,
                                            const std::string& stripe_count,
                                            const std::string& pool);

// The layout of a file or folder on CephFS: a file's ceph.file.layout.*;
// a folder's ceph.dir.layout.*, or, where the folder's was never set (it
// inherits its parent's: ENODATA), that of the first file in it. Nothing
// on another file system or where it cannot be read.
std::optional<FileLayout> read_file_layout(const std::string& path);

// Sets `request` on the empty file (or folder: what is made in it
// inherits it) open as `fd`, named `path`, before any byte is written:
// empty, or why not ("ext4 has no ceph.file.layout: Operation not
// supported"), for the run's one warning.
std::string set_file_layout(int fd, const std::string& path, bool folder,
                            const FileLayout& request);

// A Ceph pool's replication: its size (copies of each object). Ceph has
// no attribute for it; `ceph osd pool get POOL size --format=json` gives
// it, bounded by `timeout 10` so a cluster that does not answer never
// holds the report. CEPH_CONF, where set, is the ceph CLI's own.
struct PoolReplication {
  std::optional<int> copies;
  std::string unknown_why;  // where copies is empty: "ceph CLI not found", ...
};
PoolReplication pool_replication(const std::string& pool);
// The copies in that command's JSON ({"pool":"x","pool_id":1,"size":2}).
std::optional<int> parse_pool_size(const std::string& json_text);

}  // namespace iotest
