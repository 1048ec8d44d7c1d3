#include "iotest/storage/s3/multipart_upload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

namespace iotest::storage::s3 {

MultipartUpload::MultipartUpload(S3Config config, ObjectUrl object, std::string upload_id,
                                 int parts_in_flight, RetryPolicy retry, ProgressTable* watch)
    : config_(std::move(config)),
      object_(std::move(object)),
      upload_id_(std::move(upload_id)),
      parts_in_flight_(parts_in_flight),
      retry_(retry),
      watch_(watch) {
  if (parts_in_flight < 1)
    throw std::invalid_argument(fmt::format("{}: {} parts in flight (expected 1 or more)",
                                            to_string(object_), parts_in_flight));
  for (int i = 0; i < parts_in_flight; ++i) workers_.emplace_back([this] { work(); });
}

MultipartUpload::~MultipartUpload() {
  abort();
}

void MultipartUpload::check_limits(std::size_t bytes) const {
  const auto too = [&](const std::string& why) {
    return std::invalid_argument(
        fmt::format("{}: part {}: {}", to_string(object_), parts_added_ + 1, why));
  };
  if (closed_) throw std::logic_error(to_string(object_) + ": a part after finish() or abort()");
  if (parts_added_ >= kMaxParts)
    throw too(
        fmt::format("S3 takes at most {} parts in an upload (make the parts larger)", kMaxParts));
  if (parts_added_ > 0 && last_part_bytes_ < kMinPartBytes)
    throw too(fmt::format("part {} has {} bytes; only the last part may be under S3's {} (5 MiB)",
                          parts_added_, last_part_bytes_, kMinPartBytes));
  if (bytes > kMaxPartBytes)
    throw too(fmt::format("{} bytes, more than S3's {} (5 GiB) a part", bytes, kMaxPartBytes));
}

void MultipartUpload::add_part(std::vector<std::byte> bytes) {
  std::unique_lock lock(lock_);
  check_limits(bytes.size());
  const auto start = std::chrono::steady_clock::now();
  changed_.wait(lock, [&] { return pending_ < parts_in_flight_ || failure_; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failure_) std::rethrow_exception(failure_);
  last_part_bytes_ = bytes.size();
  queue_.push_back({++parts_added_, std::move(bytes)});
  ++pending_;
  changed_.notify_all();
}

std::vector<CompletedPart> MultipartUpload::finish() {
  stop(false);
  std::lock_guard lock(lock_);
  if (failure_) std::rethrow_exception(failure_);
  if (completed_.empty())
    throw std::invalid_argument(to_string(object_) + ": an upload needs at least one part");
  std::sort(completed_.begin(), completed_.end(),
            [](const auto& a, const auto& b) { return a.part_number < b.part_number; });
  return completed_;
}

void MultipartUpload::abort() {
  stop(true);
}

void MultipartUpload::stop(bool drop_pending) {
  {
    std::lock_guard lock(lock_);
    closed_ = true;
    stopping_ = true;
    if (drop_pending) {
      queue_.clear();  // their buffers freed here
      cancelled_ = true;
    }
  }
  changed_.notify_all();
  for (auto& worker : workers_)
    if (worker.joinable()) worker.join();
}

bool MultipartUpload::next_part(Part& part) {
  std::unique_lock lock(lock_);
  changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return false;  // stopping, and nothing left to send
  part = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void MultipartUpload::sent(const Part& part, const std::string& etag, const S3Client& client,
                           ClientCounts& counted) {
  std::lock_guard lock(lock_);
  completed_.push_back({part.number, etag});
  bytes_sent_ += static_cast<std::int64_t>(part.bytes.size());
  --pending_;
  server_ = client.server();
  add_counts(client, counted);
  changed_.notify_all();
}

void MultipartUpload::add_counts(const S3Client& client, ClientCounts& counted) {
  requests_ += client.requests() - counted.requests;
  retries_ += client.retries() - counted.retries;
  request_seconds_ += client.request_seconds() - counted.seconds;
  counted = {client.requests(), client.retries(), client.request_seconds()};
}

void MultipartUpload::fail(std::exception_ptr failure) {
  {
    std::lock_guard lock(lock_);
    if (!failure_) failure_ = failure;  // the first: the others follow from it (cancelled)
    stopping_ = true;
    queue_.clear();
    cancelled_ = true;  // the upload will be aborted: the other parts are wasted
  }
  changed_.notify_all();
}

void MultipartUpload::work() {
  // This worker's marks, in the watchdog's table while the worker lives.
  std::unique_ptr<StorageProgress> progress;
  if (watch_) {
    progress = std::make_unique<StorageProgress>();
    progress->name(to_string(object_));
    watch_->add(progress.get());
  }
  try {
    S3Client client(config_, retry_, progress.get());
    client.cancel_when(&cancelled_);
    ClientCounts counted;
    try {
      Part part;
      while (next_part(part)) {
        const std::string etag = client.upload_part(object_, upload_id_, part.number,
                                                    part.bytes.data(), part.bytes.size());
        sent(part, etag, client, counted);
        part = {};  // its buffer freed before the next is taken
      }
    } catch (...) {
      fail(std::current_exception());
    }
    std::lock_guard lock(lock_);
    add_counts(client, counted);  // a failed part's requests and retries
  } catch (...) {
    fail(std::current_exception());  // no client: libcurl could not start
  }
  if (watch_) watch_->remove(progress.get());
}

int MultipartUpload::parts_added() const {
  std::lock_guard lock(lock_);
  return parts_added_;
}

std::int64_t MultipartUpload::bytes_sent() const {
  std::lock_guard lock(lock_);
  return bytes_sent_;
}

double MultipartUpload::request_seconds() const {
  std::lock_guard lock(lock_);
  return request_seconds_;
}

double MultipartUpload::wait_seconds() const {
  std::lock_guard lock(lock_);
  return wait_seconds_;
}

std::int64_t MultipartUpload::requests() const {
  std::lock_guard lock(lock_);
  return requests_;
}

std::int64_t MultipartUpload::retries() const {
  std::lock_guard lock(lock_);
  return retries_;
}

std::string MultipartUpload::server() const {
  std::lock_guard lock(lock_);
  return server_;
}

}  // namespace iotest::storage::s3
