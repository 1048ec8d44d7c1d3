// What goes wrong on S3, and what is worth trying again. A quota, a wrong
// key or a missing bucket is an HTTP status and an S3 error code, not an
// errno; a busy or restarting gateway (5xx, SlowDown) and a dropped
// connection pass, and are retried within a bound (RetryPolicy).
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>

namespace iotest::storage::s3 {

// A request that failed for good: after its retries, or at once when
// trying again could not help. Its text names the request, the status
// and S3's code and message; never a credential.
class S3Error : public std::runtime_error {
 public:
  struct Details {
    std::string method;       // "PUT"
    std::string endpoint;     // "http://10.0.0.2:7480"
    std::string client_host;  // the host that sent it (of many, the one cut off)
    std::string bucket;
    std::string key;         // empty: a request on the bucket
    int http_status = 0;     // 0: no reply (connection refused, timed out)
    std::string code;        // S3's Code ("NoSuchBucket"), or what failed without a reply
    std::string message;     // S3's Message, or libcurl's
    std::string request_id;  // S3's RequestId, for the store's logs
    bool retryable = false;  // the failure is of a kind worth retrying
    int attempts = 1;        // how many times it was sent
  };
  explicit S3Error(Details details);
  const Details& details() const { return details_; }
  int http_status() const { return details_.http_status; }
  const std::string& code() const { return details_.code; }
  bool retryable() const { return details_.retryable; }

 private:
  Details details_;
};

// "S3 PUT s3://b/k at http://host:7480: 403 AccessDenied: Access Denied
// (request tx0001, 1 attempt)"
std::string describe(const S3Error::Details& details);

// How hard a request is tried: `attempts` in all, waiting between them
// from `first_backoff`, doubling up to `max_backoff`, with jitter (many
// writers failing together do not retry together). An attempt is given up
// when it cannot connect within `connect_timeout`, or when nothing moves
// for `stall_timeout` (a dead gateway, rather than a slow one).
struct RetryPolicy {
  int attempts = 5;
  std::chrono::milliseconds first_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds stall_timeout{60};
};

// Whether a reply is worth asking for again: 5xx, 429, and S3's codes for
// a busy or slow service (SlowDown, RequestTimeout, InternalError, ...),
// whatever their status. Other 4xx will answer the same again.
bool retryable_reply(int http_status, std::string_view s3_code);
// Whether a failure without a reply is worth another attempt: a refused,
// reset or timed-out connection, yes; a bad certificate or an unknown
// host, no. `curl_code` is a CURLcode.
bool retryable_transport(int curl_code);

// The wait before retry number `retry` (1, 2, ...): uniform in [d/2, d],
// where d = first_backoff * 2^(retry-1), capped at max_backoff.
std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, int retry,
                                        std::mt19937_64& random);

}  // namespace iotest::storage::s3
