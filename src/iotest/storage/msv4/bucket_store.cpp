// A zarr store under an S3 prefix (zarr_store.hpp): each key an object,
// s3://BUCKET/PREFIX/KEY. Throughput on S3 comes from requests in flight,
// not from one stream, so each put is queued for one of `in_flight`
// workers, each with its own S3Client (and connection), as MultipartUpload
// sends parts. An object is durable once the store acknowledges its
// PutObject: flush() only waits for the puts pending.
//
// A prefix (list, remove_all) names a folder, as it does in a folder
// store: "vis_0" is "vis_0/", never "vis_01/".
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/msv4/zarr_store.hpp"
#include "iotest/storage/s3/s3_client.hpp"
#include "iotest/storage/s3/s3_config.hpp"

namespace iotest::storage::msv4 {
// Its own namespace: a unity group compiles several files as one, and the
// other msv4 files may have helpers of the same names.
namespace in_bucket {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "vis_0" and "vis_0/" are the folder "vis_0/"; "" is the whole store.
std::string folder_prefix(const std::string& prefix) {
  return prefix.empty() || prefix.back() == '/' ? prefix : prefix + "/";
}

// The store's place: the URL's key is its prefix, without a '/' at the
// end. A prefix is required: the store's remove_all("") (a writer's abort)
// would otherwise empty the whole bucket.
s3::ObjectUrl place_of(const std::string& url) {
  s3::ObjectUrl place = s3::parse_s3_url(url, "OUTPUT");
  while (!place.key.empty() && place.key.back() == '/') place.key.pop_back();
  if (place.key.empty())
    throw UsageError("OUTPUT", fmt::format("'{}': a processing set needs a name in the bucket "
                                           "(expected s3://BUCKET/PREFIX)",
                                           url));
  return place;
}

// A put's failure, for the one line: a store's refusal (a quota's
// QuotaExceeded, a 507) may be a full store; no reply is no such thing.
std::string said(const s3::S3Error& error) {
  return error.http_status() == 0 ? error.what() : storage_failure(error.what()).what();
}

class BucketStore final : public ZarrStore {
 public:
  BucketStore(const std::string& url, int in_flight);
  ~BucketStore() override;

  const std::string& root() const override { return root_; }
  void put(const std::string& key, Bytes bytes) override;
  std::optional<Bytes> get(const std::string& key) override;
  std::vector<std::string> list(const std::string& prefix) override;
  void flush() override;
  void remove_all(const std::string& prefix) noexcept override;
  void remove(const std::string& key) override;
  std::string durability() const override { return "each object acknowledged by the store"; }
  std::int64_t held_bytes() const override;

 private:
  struct Put {
    std::string key;
    Bytes bytes;
  };
  s3::ObjectUrl object_of(const std::string& key) const { return {place_.bucket, base_ + key}; }
  void send_puts();  // a worker
  bool next_put(Put& put);
  void sent(const std::string& key, const std::string& failure);
  // Under lock_:
  bool pending_under(const std::string& prefix) const;
  void drop_queued(const std::string& prefix);
  void throw_failure() const;

  const s3::ObjectUrl place_;
  const std::string root_;  // s3://BUCKET/PREFIX
  const std::string base_;  // what a key is prefixed with on S3: "PREFIX/"
  const s3::S3Config config_;
  const int in_flight_;
  // The workers' requests in progress end: a failure, the store's end.
  std::atomic<bool> cancelled_{false};

  std::mutex client_lock_;
  s3::S3Client client_;  // the caller's own requests: get, list, remove_all

  mutable std::mutex lock_;
  std::condition_variable queued_;  // a put queued; the end
  std::condition_variable sent_;    // a put sent or failed (a slot free)
  std::deque<Put> queue_;
  std::set<std::string> pending_;  // the keys queued or being sent, one put each
  std::size_t largest_put_ = 0;
  std::string failure_;  // the first failed put's; empty: none
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // last: started once the rest is ready
};

BucketStore::BucketStore(const std::string& url, int in_flight)
    : place_(place_of(url)),
      root_(s3::to_string(place_)),
      base_(place_.key + "/"),
      config_(s3::load_s3_config()),
      in_flight_(in_flight),
      client_(config_) {
  if (in_flight < 1)
    throw std::invalid_argument(
        fmt::format("{}: {} writes in flight (expected 1 or more)", root_, in_flight));
  for (int i = 0; i < in_flight; ++i) workers_.emplace_back([this] { send_puts(); });
}

BucketStore::~BucketStore() {
  {
    std::lock_guard lock(lock_);
    stopping_ = true;
    // Puts never flushed: an abort's, to be removed. Not sent.
    drop_queued("");
    cancelled_ = true;
  }
  queued_.notify_all();
  for (auto& worker : workers_) worker.join();
}

// What puts may hold: each of the `in_flight` pending ones at most the
// largest put so far (puts vary in size: a chunk, a zarr.json).
std::int64_t BucketStore::held_bytes() const {
  std::lock_guard lock(lock_);
  return static_cast<std::int64_t>(in_flight_) * static_cast<std::int64_t>(largest_put_);
}

void BucketStore::put(const std::string& key, Bytes bytes) {
  const auto start = Clock::now();
  if (key.empty() || key.front() == '/')
    throw std::invalid_argument(fmt::format("{}: '{}' is not a zarr key", root_, key));
  if (bytes.size() > s3::kMaxPartBytes)
    throw std::invalid_argument(fmt::format("{}/{}: {} bytes, more than S3 takes in one put ({})",
                                            root_, key, bytes.size(), s3::kMaxPartBytes));
  const auto size = bytes.size();
  std::unique_lock lock(lock_);
  // One put of a key at a time: two in flight could land in either order.
  sent_.wait(lock, [&] {
    return (static_cast<int>(pending_.size()) < in_flight_ && !pending_.count(key)) ||
           !failure_.empty();
  });
  throw_failure();
  largest_put_ = std::max(largest_put_, size);
  pending_.insert(key);
  queue_.push_back({key, std::move(bytes)});
  queued_.notify_one();
  ++stats_.keys_written;
  stats_.bytes_written += static_cast<std::int64_t>(size);
  stats_.put_s += seconds_since(start);
}

void BucketStore::send_puts() {
  try {
    s3::S3Client client(config_);
    client.cancel_when(&cancelled_);
    Put put;
    while (next_put(put)) {
      std::string failure;
      try {
        client.put_object(object_of(put.key), put.bytes.data(), put.bytes.size());
      } catch (const s3::S3Error& e) {
        failure = said(e);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      sent(put.key, failure);
      put = {};  // its bytes freed before the next is taken
    }
  } catch (const std::exception& e) {
    sent("", e.what());  // no client (libcurl could not start): no put taken
  }
}

bool BucketStore::next_put(Put& put) {
  std::unique_lock lock(lock_);
  queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return false;  // stopping, and nothing left to send
  put = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void BucketStore::sent(const std::string& key, const std::string& failure) {
  {
    std::lock_guard lock(lock_);
    pending_.erase(key);
    if (!failure.empty() && failure_.empty()) {
      failure_ = failure;  // the first: later ones may follow from it
      // The run fails: the puts queued and being sent are wasted.
      drop_queued("");
      cancelled_ = true;
    }
  }
  sent_.notify_all();
}

bool BucketStore::pending_under(const std::string& prefix) const {
  const auto first = pending_.lower_bound(prefix);  // the set is sorted: they follow it
  return first != pending_.end() && first->starts_with(prefix);
}

void BucketStore::drop_queued(const std::string& prefix) {
  std::erase_if(queue_, [&](const Put& put) {
    if (!put.key.starts_with(prefix)) return false;
    pending_.erase(put.key);
    return true;
  });
}

void BucketStore::throw_failure() const {
  if (!failure_.empty()) throw std::runtime_error(failure_);
}

void BucketStore::flush() {
  const auto start = Clock::now();
  std::unique_lock lock(lock_);
  sent_.wait(lock, [&] { return pending_.empty() || !failure_.empty(); });
  throw_failure();
  stats_.flush_s += seconds_since(start);
}

std::optional<Bytes> BucketStore::get(const std::string& key) {
  {
    std::unique_lock lock(lock_);
    sent_.wait(lock, [&] { return !pending_.count(key) || !failure_.empty(); });
    throw_failure();  // the key's put may have been dropped
  }
  const auto object = object_of(key);
  std::lock_guard client(client_lock_);
  const auto head = client_.head_object(object);
  if (!head) return std::nullopt;
  Bytes bytes(static_cast<std::size_t>(head->size));
  client_.get_range(object, 0, bytes.size(), bytes.data());  // none for 0 bytes
  return bytes;
}

std::vector<std::string> BucketStore::list(const std::string& prefix) {
  const std::string folder = folder_prefix(prefix);
  {
    std::unique_lock lock(lock_);
    sent_.wait(lock, [&] { return !pending_under(folder) || !failure_.empty(); });
    throw_failure();
  }
  std::lock_guard client(client_lock_);
  std::vector<std::string> keys;
  for (const auto& entry : client_.list_objects(place_.bucket, base_ + folder)) {
    // A key ending in '/' is a console's "folder", not a zarr key.
    if (entry.key.starts_with(base_) && !entry.key.ends_with('/'))
      keys.push_back(entry.key.substr(base_.size()));
  }
  return keys;
}

void BucketStore::remove(const std::string& key) {
  {
    std::unique_lock lock(lock_);  // a put of it in flight ends first
    sent_.wait(lock, [&] { return !pending_under(key); });
  }
  std::lock_guard client(client_lock_);
  try {
    client_.delete_object({place_.bucket, base_ + key});
  } catch (const s3::S3Error& e) {
    throw std::runtime_error(said(e));
  }
}

void BucketStore::remove_all(const std::string& prefix) noexcept {
  try {
    const std::string folder = folder_prefix(prefix);
    {
      // No put left to make an object again once it is removed.
      std::unique_lock lock(lock_);
      drop_queued(folder);
      sent_.wait(lock, [&] { return !pending_under(folder); });
    }
    std::lock_guard client(client_lock_);
    for (const auto& entry : client_.list_objects(place_.bucket, base_ + folder)) {
      try {
        client_.delete_object({place_.bucket, entry.key});
      } catch (...) {  // an abort removes what it can
      }
    }
  } catch (...) {  // the listing failed: nothing more to remove
  }
}

}  // namespace
}  // namespace in_bucket

std::unique_ptr<ZarrStore> bucket_store(const std::string& url, int in_flight) {
  return std::make_unique<in_bucket::BucketStore>(url, in_flight);
}

std::unique_ptr<ZarrStore> zarr_store_at(const std::string& place, int in_flight) {
  return s3::is_s3_url(place) ? bucket_store(place, in_flight) : folder_store(place, in_flight);
}

}  // namespace iotest::storage::msv4
