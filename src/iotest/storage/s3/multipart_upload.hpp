// One object uploaded in parts, several at once: on S3 throughput comes
// from requests in flight, not from one stream. The caller begins the
// upload (S3Client::create_multipart_upload), hands its parts over in
// order, and completes it with finish()'s parts, or aborts it.
//
// Up to `parts_in_flight` parts are pending (queued or being sent), each
// sent by one of as many worker threads, each with its own S3Client (and
// connection). A part's buffer is moved in and freed once sent, so a
// writer holds at most parts_in_flight parts besides the one it fills.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "iotest/storage/s3/s3_client.hpp"

namespace iotest::storage::s3 {

class MultipartUpload {
 public:
  // `watch`, when given, is the table the storage watchdog reads
  // (rank_progress()): each worker's requests are marked in it, named
  // with the object's URL.
  MultipartUpload(S3Config config, ObjectUrl object, std::string upload_id, int parts_in_flight,
                  RetryPolicy retry = {}, ProgressTable* watch = nullptr);
  // Stops the workers (abort()) unless finish() has.
  ~MultipartUpload();
  MultipartUpload(const MultipartUpload&) = delete;
  MultipartUpload& operator=(const MultipartUpload&) = delete;

  // The next part (numbered 1, 2, ... in the order given), queued for a
  // worker. Waits while parts_in_flight parts are pending. A worker's
  // failure is rethrown here; a part past S3's limits (kMaxParts; under
  // kMinPartBytes and not the last; over kMaxPartBytes) is an
  // std::invalid_argument.
  void add_part(std::vector<std::byte> bytes);
  // Waits for every part to be sent: the parts in order, for
  // S3Client::complete_multipart_upload. Rethrows the first failure.
  std::vector<CompletedPart> finish();
  // Drops the parts not sent, ends those being sent and stops the workers;
  // the caller then aborts the upload (S3Client::abort_multipart_upload).
  void abort();

  const ObjectUrl& object() const { return object_; }
  int parts_added() const;
  std::int64_t bytes_sent() const;  // the parts sent so far
  // Seconds the workers' requests took, summed (the raw I/O), apart from
  // the seconds add_part waited for a free slot.
  double request_seconds() const;
  double wait_seconds() const;
  std::int64_t requests() const;
  std::int64_t retries() const;
  std::string server() const;  // the store, as the last reply named it

 private:
  struct Part {
    int number = 0;
    std::vector<std::byte> bytes;
  };
  void check_limits(std::size_t bytes) const;
  void work();
  bool next_part(Part& part);
  // What of a worker's client's counts is in the totals already.
  struct ClientCounts {
    std::int64_t requests = 0;
    std::int64_t retries = 0;
    double seconds = 0;
  };
  void sent(const Part& part, const std::string& etag, const S3Client& client,
            ClientCounts& counted);
  void add_counts(const S3Client& client, ClientCounts& counted);  // under lock_
  void fail(std::exception_ptr failure);
  void stop(bool drop_pending);

  const S3Config config_;
  const ObjectUrl object_;
  const std::string upload_id_;
  const int parts_in_flight_;
  const RetryPolicy retry_;
  ProgressTable* const watch_;
  std::atomic<bool> cancelled_{false};  // the requests in progress end

  mutable std::mutex lock_;
  std::condition_variable changed_;  // a part queued, sent or failed; the end
  std::deque<Part> queue_;
  int pending_ = 0;  // queued or being sent
  int parts_added_ = 0;
  std::size_t last_part_bytes_ = 0;
  bool closed_ = false;    // finish() or abort(): no more parts
  bool stopping_ = false;  // the workers leave once the queue is empty
  std::exception_ptr failure_;
  std::vector<CompletedPart> completed_;
  std::int64_t bytes_sent_ = 0;
  double request_seconds_ = 0;
  double wait_seconds_ = 0;
  std::int64_t requests_ = 0;
  std::int64_t retries_ = 0;
  std::string server_;
  std::vector<std::thread> workers_;  // last: started once the rest is ready
};

}  // namespace iotest::storage::s3
