// A client of one S3 store (AWS, Ceph's radosgw, MinIO), in path style
// (ENDPOINT/BUCKET/KEY, which every store takes). Requests are signed by
// libcurl (SigV4, CURLOPT_AWS_SIGV4), with an unsigned payload: the data
// is not hashed twice, and radosgw needs the x-amz-content-sha256 header.
//
// One client holds one connection, kept alive between its requests; it is
// not thread-safe: one client per thread (MultipartUpload gives each of
// its workers one). Failures are S3Errors, after the retries RetryPolicy
// allows.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "iotest/storage/s3/object_url.hpp"
#include "iotest/storage/s3/s3_config.hpp"
#include "iotest/storage/s3/s3_error.hpp"
#include "iotest/storage/s3/s3_xml.hpp"
#include "iotest/storage/storage_progress.hpp"

namespace iotest::storage::s3 {

// What HeadObject says of an object.
struct ObjectHead {
  std::int64_t size = 0;
  std::string etag;
};

// User metadata, stored with the object as x-amz-meta-NAME headers: names
// of letters, digits, '-' and '_'; values of printable ASCII, not empty.
using ObjectMetadata = std::map<std::string, std::string>;

// S3's limits on a multipart upload.
inline constexpr int kMaxParts = 10000;
inline constexpr std::size_t kMinPartBytes = std::size_t{5} << 20;  // but the last
inline constexpr std::size_t kMaxPartBytes = std::size_t{5} << 30;

// A request and its reply (s3_client.cpp).
struct S3Request;
struct S3Reply;

class S3Client {
 public:
  // `progress`, when given, is marked for each request (with its retries),
  // so the storage watchdog sees a store that stopped answering; it is
  // named (StorageProgress::name) by the caller.
  explicit S3Client(S3Config config, RetryPolicy retry = {}, StorageProgress* progress = nullptr);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Whether the bucket is there and ours to use: an S3Error saying which
  // when not (NoSuchBucket; AccessDenied for a wrong key or a bucket the
  // key is not allowed).
  void head_bucket(const std::string& bucket);
  // Nothing when there is no such object.
  std::optional<ObjectHead> head_object(const ObjectUrl& object);

  // A multipart upload begun: its upload id. Nothing is visible until it
  // is completed (completion publishes the object).
  std::string create_multipart_upload(const ObjectUrl& object, const ObjectMetadata& metadata = {});
  // Part `part_number` (1 to kMaxParts) sent from `data`, which is not
  // copied: its ETag, for completing.
  std::string upload_part(const ObjectUrl& object, const std::string& upload_id, int part_number,
                          const void* data, std::size_t bytes);
  // The parts, in ascending part numbers, made one object: its ETag, as
  // the store gives it (radosgw 16.2 gives an empty one; head_object has it).
  std::string complete_multipart_upload(const ObjectUrl& object, const std::string& upload_id,
                                        const std::vector<CompletedPart>& parts);
  // The parts of an upload in progress, every page, in ascending part
  // numbers: what completing it from another process lists.
  std::vector<CompletedPart> list_parts(const ObjectUrl& object, const std::string& upload_id);
  // The upload and its parts dropped (an upload gone already is no error).
  void abort_multipart_upload(const ObjectUrl& object, const std::string& upload_id);
  // The uploads begun and not completed under `prefix`, every page.
  std::vector<PendingUpload> list_multipart_uploads(const std::string& bucket,
                                                    const std::string& prefix = "");

  // `bytes` from `offset` into `out`: exactly that many, else an S3Error.
  void get_range(const ObjectUrl& object, std::uint64_t offset, std::size_t bytes, void* out);
  // A whole object in one request (at most kMaxPartBytes): its ETag.
  std::string put_object(const ObjectUrl& object, const void* data, std::size_t bytes,
                         const ObjectMetadata& metadata = {});
  // The object removed (one not there is no error, as in S3).
  void delete_object(const ObjectUrl& object);
  // The objects under `prefix`, every page (ListObjectsV2).
  std::vector<ObjectEntry> list_objects(const std::string& bucket, const std::string& prefix = "");

  // The store's software, as the last reply that named it did: its Server
  // header ("AmazonS3", "MinIO"), or "Ceph Object Gateway" for radosgw,
  // which sends none (known after head_bucket); empty until named.
  const std::string& server() const { return server_; }
  const std::string& endpoint() const { return config_.endpoint; }
  // Requests sent (each attempt), of them retries, and the seconds spent
  // in them (transfers only: not the waits between attempts).
  std::int64_t requests() const { return requests_; }
  std::int64_t retries() const { return retries_; }
  double request_seconds() const { return request_seconds_; }

  // A request in progress while `*cancel` is true ends at once with a
  // (not retryable) S3Error: an upload being aborted. Null: never.
  void cancel_when(const std::atomic<bool>* cancel) { cancel_ = cancel; }

 private:
  S3Reply perform(const S3Request& request);
  S3Reply attempt(const S3Request& request);
  void prepare(const S3Request& request, const std::string& url, void* headers, void* transfer);
  std::string request_url(const S3Request& request) const;
  S3Error::Details details_of(const S3Request& request) const;  // the request's part
  std::optional<S3Error::Details> failure_of(const S3Request& request, const S3Reply& reply) const;
  // A reply that is not what the request asks for (not retried).
  // A listing's query parameters for its next page.
  using Query = std::map<std::string, std::string>;
  // Every page of a listing, the entries of each in order: `parse` reads a
  // page, `next` names the page after a truncated one.
  template <typename Page, typename Entry, typename Next>
  std::vector<Entry> every_page(S3Request& request, Page (*parse)(std::string_view),
                                std::vector<Entry> Page::*entries, Next next);
  [[noreturn]] void throw_malformed(const S3Request& request, const S3Reply& reply,
                                    const std::string& why) const;

  S3Config config_;
  RetryPolicy retry_;
  StorageProgress* progress_;
  std::string signing_;  // CURLOPT_AWS_SIGV4's "aws:amz:REGION:s3"
  void* curl_;           // the CURL easy handle, reused: its connection kept alive
  const std::atomic<bool>* cancel_ = nullptr;
  std::mt19937_64 random_;  // the backoff's jitter
  std::string server_;
  std::int64_t requests_ = 0;
  std::int64_t retries_ = 0;
  double request_seconds_ = 0;
};

}  // namespace iotest::storage::s3
