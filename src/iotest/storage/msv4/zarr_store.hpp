// Where a processing set's zarr keys live (zarr's "store"): a folder, each
// key a file under it, or an S3 prefix, each key an object under it. Keys
// are relative to the processing set's root, '/'-separated, as zarr names
// them ("vis_0/VISIBILITY/c/3/0/1/0", "vis_0/zarr.json").
//
// A key is written whole, once (a chunk is a file or an object written
// once); writes may go on in the background (files synced by a pool of
// threads, objects sent several at once), and flush() waits for every one
// to be durable. A failure of a write in the background is thrown by a
// later call (put, flush).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace iotest::storage::msv4 {

using Bytes = std::vector<std::byte>;

// What a store's writes cost, for the report (WriteStats).
struct ZarrStoreStats {
  std::int64_t keys_written = 0;
  std::int64_t bytes_written = 0;
  double put_s = 0;    // the writer's time inside put (waits for a free slot included)
  double flush_s = 0;  // inside flush
};

class ZarrStore {
 public:
  virtual ~ZarrStore() = default;
  // What it is, for messages: the folder's path, or s3://BUCKET/PREFIX.
  virtual const std::string& root() const = 0;
  // `bytes` as key `key`, replacing what was there. May return before the
  // key is durable (flush() waits).
  virtual void put(const std::string& key, Bytes bytes) = 0;
  // The same from the caller's buffer, copied only where the store keeps
  // the bytes past the call (an object store's upload in the background):
  // a folder store writes them to the file at once, so a chunk costs no
  // buffer of its own (issue 58: 8 % of one writer's stream).
  virtual void put_copy(const std::string& key, std::span<const std::byte> bytes) {
    put(key, Bytes(bytes.begin(), bytes.end()));
  }
  // A key that will be put later, made now where that costs (a folder
  // store's file: an inode, which ext4 without a journal allocates in
  // 0.5-0.9 ms on the development VM), as HDF5 allocates its chunks at
  // create and Lustre's OSTs precreate objects; nothing on an object
  // store. Such a key is empty until put; remove() one never put.
  virtual void reserve(const std::string& /*key*/) {}
  // The key removed (none there: no error).
  virtual void remove(const std::string& key) = 0;
  // The whole key, or nothing where there is none. Sees every put made
  // before it by this store (a put still in the background is waited for).
  virtual std::optional<Bytes> get(const std::string& key) = 0;
  // Every key under `prefix` ("vis_0/VISIBILITY/c/"), relative to the
  // root, in no particular order.
  virtual std::vector<std::string> list(const std::string& prefix) = 0;
  // Every put so far durable: files and their folders synced, objects
  // acknowledged by the store.
  virtual void flush() = 0;
  // Every key under `prefix` removed ("": the whole store's), for a
  // writer's abort. Never throws.
  virtual void remove_all(const std::string& prefix) noexcept = 0;
  // What its durability covers, for the report ("fsync of every file").
  virtual std::string durability() const = 0;
  // Bytes it holds in puts not yet done, at most (the memory model's).
  virtual std::int64_t held_bytes() const = 0;
  const ZarrStoreStats& stats() const { return stats_; }

 protected:
  ZarrStoreStats stats_;
};

// How many writes a store keeps going at once (files being synced,
// objects in flight): --msv4.in-flight.
inline constexpr int kDefaultInFlight = 8;

// A folder (made if missing; its parent must exist). Each put writes its
// file (folders made as needed), hands it to the device at once
// (sync_file_range) and to one of `in_flight` threads that fsyncs and
// closes it; flush() waits for them and syncs the folders made.
std::unique_ptr<ZarrStore> folder_store(const std::string& folder,
                                        int in_flight = kDefaultInFlight);

// Objects under s3://BUCKET/PREFIX (the store's configuration as the AWS
// tools find it, s3_config.hpp): each put is a PutObject on one of
// `in_flight` workers, each with its own connection; a put waits while
// `in_flight` are pending. (The writer's own calls are watched, as the s3
// back-end's are: a put waits while none of those in flight moves.)
std::unique_ptr<ZarrStore> bucket_store(const std::string& url, int in_flight = kDefaultInFlight);

// The store for a processing set's place: bucket_store for an s3:// URL,
// folder_store otherwise.
std::unique_ptr<ZarrStore> zarr_store_at(const std::string& place,
                                         int in_flight = kDefaultInFlight);

}  // namespace iotest::storage::msv4
