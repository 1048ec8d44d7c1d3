#include "iotest/storage/s3/s3_error.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace iotest::storage::s3 {

std::string describe(const S3Error::Details& d) {
  std::string object = "s3://" + d.bucket;
  if (!d.key.empty()) object += "/" + d.key;
  const std::string status =
      d.http_status ? fmt::format("{} {}", d.http_status, d.code) : "no reply (" + d.code + ")";
  std::string text = fmt::format("S3 {} {} at {}{}: {}", d.method, object, d.endpoint,
                                 d.client_host.empty() ? "" : " from " + d.client_host, status);
  if (!d.message.empty()) text += ": " + d.message;
  std::string notes = fmt::format("{} attempt{}", d.attempts, d.attempts == 1 ? "" : "s");
  if (!d.request_id.empty()) notes = "request " + d.request_id + ", " + notes;
  return text + " (" + notes + ")";
}

S3Error::S3Error(Details details)
    : std::runtime_error(describe(details)), details_(std::move(details)) {}

bool retryable_reply(int http_status, std::string_view s3_code) {
  // The codes AWS's SDKs retry on: a service busy, slow or failing, not a
  // request that is wrong. S3 may send them with a 200 (CompleteMultipart).
  // (Not RequestTimeTooSkewed: the clock is wrong, and stays wrong.)
  static constexpr std::array<std::string_view, 6> kTransientCodes = {
      "SlowDown",           "RequestTimeout", "InternalError",
      "ServiceUnavailable", "Throttling",     "ThrottlingException"};
  if (http_status >= 500 || http_status == 429) return true;
  return std::find(kTransientCodes.begin(), kTransientCodes.end(), s3_code) !=
         kTransientCodes.end();
}

bool retryable_transport(int curl_code) {
  switch (static_cast<CURLcode>(curl_code)) {
    case CURLE_COULDNT_CONNECT:     // a gateway restarting
    case CURLE_OPERATION_TIMEDOUT:  // connect timeout, or the stall bound
    case CURLE_SEND_ERROR:          // a connection reset while sending
    case CURLE_RECV_ERROR:          // ... while receiving
    case CURLE_GOT_NOTHING:         // a kept-alive connection the server had closed
    case CURLE_PARTIAL_FILE:        // a reply cut short
    case CURLE_SSL_CONNECT_ERROR:   // a handshake cut short
    case CURLE_HTTP2:               // an HTTP/2 stream reset
    case CURLE_HTTP2_STREAM:
      return true;
    default:  // an unknown host, a bad certificate, a cancelled run: the same again
      return false;
  }
}

std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, int retry,
                                        std::mt19937_64& random) {
  // Doubled in double: 2^(retry-1) overflows no integer for a large retry.
  const double doubled =
      static_cast<double>(policy.first_backoff.count()) * std::pow(2.0, std::max(retry - 1, 0));
  const double ceiling = std::min(doubled, static_cast<double>(policy.max_backoff.count()));
  std::uniform_real_distribution<double> jitter(ceiling / 2, ceiling);
  return std::chrono::milliseconds(static_cast<std::int64_t>(jitter(random)));
}

}  // namespace iotest::storage::s3
