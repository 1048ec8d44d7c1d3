#include "iotest/storage/s3/s3_client.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "iotest/common/system.hpp"

namespace iotest::storage::s3 {

struct S3Request {
  S3Request(const char* method_, StorageStep step_, ObjectUrl target_)
      : method(method_), step(step_), target(std::move(target_)) {}
  const char* method;  // GET, HEAD, PUT, POST or DELETE
  StorageStep step;    // as the storage watchdog names it
  ObjectUrl target;    // the bucket, and the object's key (empty: the bucket's)
  std::map<std::string, std::string> query;
  std::vector<std::string> headers;  // "Name: value", besides those every request has
  std::string_view body;             // what PUT and POST send (not copied)
  std::string range;                 // a GET's "FIRST-LAST" bytes
  std::byte* into = nullptr;         // a GET's data goes there (not into the reply)
  std::size_t into_bytes = 0;
  bool not_found_is_answer = false;  // a 404 is a reply (HeadObject), not a failure
  bool error_in_ok_reply = false;    // a 200 may carry an <Error> (CompleteMultipartUpload)
};

struct S3Reply {
  CURLcode curl_code = CURLE_OK;
  std::string curl_message;
  long status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // unless the request has `into`
  std::size_t received = 0;                    // bytes put into the request's `into`
  bool too_long = false;                       // more bytes came than `into` holds

  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

namespace {

// A reply body beyond this (a listing is 1000 keys) is not S3's.
constexpr std::size_t kMaxReplyBytes = std::size_t{64} << 20;

// libcurl's global set-up, once, before the first handle: not safe to do
// from two threads at once.
void init_libcurl_once() {
  // With CURLOPT_NOSIGNAL (threads), a TLS connection the store closed can
  // raise SIGPIPE as OpenSSL writes to it, which would end the process
  // without a word; ignored, the write fails and the request is retried
  // (libcurl's advice for CURLOPT_NOSIGNAL).
  static const bool pipe_ignored = std::signal(SIGPIPE, SIG_IGN) != SIG_ERR;
  (void)pipe_ignored;
  static const CURLcode ready = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (ready != CURLE_OK)
    throw std::runtime_error(fmt::format("libcurl: {}", curl_easy_strerror(ready)));
}

// What the callbacks of one attempt share.
struct Transfer {
  CURL* curl;
  const S3Request& request;
  S3Reply& reply;
  const std::atomic<bool>* cancel;
  std::size_t sent = 0;  // bytes of the request's body given to libcurl
  bool status_known = false;
};

std::string_view trimmed_header(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto& reply = static_cast<Transfer*>(user)->reply;
  const std::string_view line(data, size * count);
  // A status line starts a reply: the headers of a "100 Continue" before
  // the final reply are not the final reply's.
  if (line.substr(0, 5) == "HTTP/") reply.headers.clear();
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return size * count;
  std::string name(trimmed_header(line.substr(0, colon)));
  for (char& c : name)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  reply.headers[name] = std::string(trimmed_header(line.substr(colon + 1)));
  return size * count;
}

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  auto& reply = transfer.reply;
  const std::size_t bytes = size * count;
  if (!transfer.status_known) {
    curl_easy_getinfo(transfer.curl, CURLINFO_RESPONSE_CODE, &reply.status);
    transfer.status_known = true;
  }
  const bool data_reply = reply.status >= 200 && reply.status < 300;
  if (transfer.request.into && data_reply) {
    // Straight into the caller's buffer; more than asked ends the transfer.
    if (bytes > transfer.request.into_bytes - reply.received) {
      reply.too_long = true;
      return 0;
    }
    std::memcpy(transfer.request.into + reply.received, data, bytes);
    reply.received += bytes;
    return bytes;
  }
  if (reply.body.size() + bytes > kMaxReplyBytes) {
    reply.too_long = true;
    return 0;
  }
  reply.body.append(data, bytes);
  return bytes;
}

std::size_t on_send(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  const auto& body = transfer.request.body;
  const std::size_t bytes = std::min(size * count, body.size() - transfer.sent);
  std::memcpy(buffer, body.data() + transfer.sent, bytes);
  transfer.sent += bytes;
  return bytes;
}

// libcurl sends the body again when a kept-alive connection turns out to
// be closed: it rewinds it here.
int on_rewind(void* user, curl_off_t offset, int origin) {
  auto& transfer = *static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 ||
      static_cast<std::uint64_t>(offset) > transfer.request.body.size())
    return CURL_SEEKFUNC_CANTSEEK;
  transfer.sent = static_cast<std::size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<Transfer*>(user)->cancel;
  return cancel && cancel->load(std::memory_order_relaxed) ? 1 : 0;
}

struct FreeHeaders {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using CurlHeaders = std::unique_ptr<curl_slist, FreeHeaders>;

void add_header(CurlHeaders& list, const std::string& header) {
  curl_slist* longer = curl_slist_append(list.get(), header.c_str());
  if (!longer) throw std::bad_alloc();
  (void)list.release();  // `longer` is the same list, one longer
  list.reset(longer);
}

// The metadata as x-amz-meta-* headers. Names and values are checked:
// they go into the request's header lines and its signature.
std::vector<std::string> metadata_headers(const ObjectMetadata& metadata) {
  std::vector<std::string> headers;
  for (const auto& [name, value] : metadata) {
    const bool good_name = !name.empty() && name.find_first_not_of(
                                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
                                                "WXYZ0123456789-_") == std::string::npos;
    bool good_value = !value.empty();
    for (char c : value) good_value = good_value && c >= 0x20 && c < 0x7f;
    if (!good_name || !good_value)
      throw std::invalid_argument(fmt::format(
          "S3 metadata '{}': expected a name of letters, digits, '-' and '_', and a value of "
          "printable ASCII",
          name));
    headers.push_back(fmt::format("x-amz-meta-{}: {}", name, value));
  }
  return headers;
}

// HEAD replies have no body, so no S3 code: the status's name stands in.
std::string status_name(long status) {
  switch (status) {
    case 301:
      return "PermanentRedirect";
    case 307:
      return "TemporaryRedirect";
    case 400:
      return "BadRequest";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 412:
      return "PreconditionFailed";
    case 416:
      return "InvalidRange";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalServerError";
    case 502:
      return "BadGateway";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "GatewayTimeout";
    default:
      return fmt::format("HTTP{}", status);
  }
}

// The store's software as a reply names it: its Server header; radosgw
// (16.2) sends none, but its replies about a bucket carry X-RGW-* headers.
std::string store_named_by(const S3Reply& reply) {
  if (auto server = reply.header("server"); !server.empty()) return server;
  const auto rgw = reply.headers.lower_bound("x-rgw-");
  if (rgw != reply.headers.end() && rgw->first.rfind("x-rgw-", 0) == 0)
    return "Ceph Object Gateway";
  return "";
}

std::int64_t header_integer(const std::string& text) {
  std::int64_t value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() ? value : -1;
}

}  // namespace

S3Client::S3Client(S3Config config, RetryPolicy retry, StorageProgress* progress)
    : config_(std::move(config)),
      retry_(retry),
      progress_(progress),
      signing_("aws:amz:" + config_.region + ":s3"),
      curl_(nullptr),
      random_(std::random_device{}()) {
  init_libcurl_once();
  curl_ = curl_easy_init();
  if (!curl_) throw std::runtime_error("libcurl: cannot make a handle");
}

S3Client::~S3Client() {
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string S3Client::request_url(const S3Request& request) const {
  // Path style, encoded as the signature has it (libcurl 7.88 signs the
  // path and query as written; PATH_AS_IS keeps "a/../b" a key).
  std::string url = config_.endpoint + "/" + uri_encode(request.target.bucket, false);
  if (!request.target.key.empty()) url += "/" + uri_encode(request.target.key, true);
  if (!request.query.empty()) url += "?" + canonical_query(request.query);
  return url;
}

void S3Client::prepare(const S3Request& request, const std::string& url, void* headers,
                       void* transfer) {
  CURL* curl = static_cast<CURL*>(curl_);
  // Reset keeps the connection (and the DNS and TLS session caches).
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, signing_.c_str());
  curl_easy_setopt(curl, CURLOPT_USERNAME, config_.access_key_id.c_str());
  curl_easy_setopt(curl, CURLOPT_PASSWORD, config_.secret_access_key.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers));
  if (!config_.ca_bundle.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_bundle.c_str());
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(retry_.connect_timeout.count() * 1000));
  // A dead gateway: nothing moving (under a byte a second) for the bound.
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(retry_.stall_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, transfer);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, transfer);
  const std::string_view method = request.method;
  if (method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_send);
    curl_easy_setopt(curl, CURLOPT_READDATA, transfer);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, on_rewind);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, transfer);
  } else if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data() ? request.body.data() : "");
  } else if (method == "DELETE") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  if (!request.range.empty()) curl_easy_setopt(curl, CURLOPT_RANGE, request.range.c_str());
}

S3Reply S3Client::attempt(const S3Request& request) {
  CURL* curl = static_cast<CURL*>(curl_);
  CurlHeaders headers;
  // Every request: an unsigned payload (radosgw wants the header with
  // libcurl's SigV4), and the session's token with temporary keys.
  add_header(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!config_.session_token.empty())
    add_header(headers, "x-amz-security-token: " + config_.session_token);
  for (const auto& header : request.headers) add_header(headers, header);
  S3Reply reply;
  Transfer transfer{curl, request, reply, cancel_};
  const std::string url = request_url(request);
  prepare(request, url, headers.get(), &transfer);
  char message[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, message);
  const auto start = std::chrono::steady_clock::now();
  reply.curl_code = curl_easy_perform(curl);
  request_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++requests_;
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);  // `message` ends here
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  reply.curl_message = message[0] ? message : curl_easy_strerror(reply.curl_code);
  if (const auto store = store_named_by(reply); !store.empty()) server_ = store;
  return reply;
}

std::optional<S3Error::Details> S3Client::failure_of(const S3Request& request,
                                                     const S3Reply& reply) const {
  S3Error::Details failure = details_of(request);
  failure.request_id = reply.header("x-amz-request-id");
  if (reply.too_long) {
    failure.http_status = static_cast<int>(reply.status);
    failure.code = "ReplyTooLong";
    failure.message = request.into ? fmt::format("the store sent more than the {} bytes asked",
                                                 request.into_bytes)
                                   : "the reply is larger than any S3 reply";
    return failure;
  }
  if (reply.curl_code != CURLE_OK) {
    failure.code = curl_easy_strerror(reply.curl_code);
    failure.message = reply.curl_message;
    failure.retryable = retryable_transport(reply.curl_code);
    return failure;
  }
  const bool ok = reply.status >= 200 && reply.status < 300;
  if (ok && !request.error_in_ok_reply) return std::nullopt;
  if (reply.status == 404 && request.not_found_is_answer) return std::nullopt;
  const auto error = parse_error(reply.body);
  if (ok && !error) return std::nullopt;
  failure.http_status = static_cast<int>(reply.status);
  failure.code = error ? error->code : status_name(reply.status);
  if (error) failure.message = error->message;
  if (error && !error->request_id.empty()) failure.request_id = error->request_id;
  failure.retryable = retryable_reply(failure.http_status, failure.code);
  return failure;
}

S3Error::Details S3Client::details_of(const S3Request& request) const {
  S3Error::Details details;
  details.method = request.method;
  details.endpoint = config_.endpoint;
  details.client_host = host_name();
  details.bucket = request.target.bucket;
  details.key = request.target.key;
  return details;
}

S3Reply S3Client::perform(const S3Request& request) {
  // One mark for the request and its retries: the watchdog sees no
  // progress until the store has answered it.
  const ProgressMark mark(progress_, request.step);
  for (int attempt_number = 1;; ++attempt_number) {
    S3Reply reply = attempt(request);
    auto failure = failure_of(request, reply);
    if (!failure) return reply;
    failure->attempts = attempt_number;
    if (!failure->retryable || attempt_number >= retry_.attempts)
      throw S3Error(std::move(*failure));
    ++retries_;
    std::this_thread::sleep_for(backoff_delay(retry_, attempt_number, random_));
  }
}

void S3Client::throw_malformed(const S3Request& request, const S3Reply& reply,
                               const std::string& why) const {
  S3Error::Details failure = details_of(request);
  failure.http_status = static_cast<int>(reply.status);
  failure.code = "MalformedReply";
  failure.message = why;
  throw S3Error(std::move(failure));
}

void S3Client::head_bucket(const std::string& bucket) {
  const S3Request request("HEAD", StorageStep::reading, {bucket, ""});
  try {
    perform(request);
  } catch (const S3Error& error) {
    // A HEAD reply has no body: say what its status means for a bucket.
    auto details = error.details();
    if (details.http_status == 404) {
      details.code = "NoSuchBucket";
      details.message = "the bucket does not exist";
    } else if (details.http_status == 403) {
      details.code = "AccessDenied";
      details.message = fmt::format("the access key (from {}) is wrong, or not allowed this bucket",
                                    config_.credentials_from);
    } else if (details.http_status == 301) {
      details.message = fmt::format("the bucket is in another region than {}", config_.region);
    }
    throw S3Error(std::move(details));
  }
}

std::optional<ObjectHead> S3Client::head_object(const ObjectUrl& object) {
  S3Request request("HEAD", StorageStep::reading, object);
  request.not_found_is_answer = true;
  const S3Reply reply = perform(request);
  if (reply.status == 404) return std::nullopt;
  const std::int64_t size = header_integer(reply.header("content-length"));
  if (size < 0) throw_malformed(request, reply, "no Content-Length in the reply");
  return ObjectHead{size, reply.header("etag")};
}

std::string S3Client::create_multipart_upload(const ObjectUrl& object,
                                              const ObjectMetadata& metadata) {
  // "uploads=", not "uploads": the signature covers the query as written,
  // and radosgw checks it in canonical form.
  S3Request request("POST", StorageStep::creating, object);
  request.query = {{"uploads", ""}};
  request.headers = metadata_headers(metadata);
  // The object's type (libcurl would say a form's).
  request.headers.push_back("Content-Type: application/octet-stream");
  const S3Reply reply = perform(request);
  try {
    return parse_initiate_multipart_upload(reply.body);
  } catch (const XmlReplyError& error) {
    throw_malformed(request, reply, error.what());
  }
}

std::string S3Client::upload_part(const ObjectUrl& object, const std::string& upload_id,
                                  int part_number, const void* data, std::size_t bytes) {
  if (part_number < 1 || part_number > kMaxParts)
    throw std::invalid_argument(fmt::format("{}: part number {} is outside S3's 1 to {}",
                                            to_string(object), part_number, kMaxParts));
  if (bytes > kMaxPartBytes)
    throw std::invalid_argument(fmt::format("{}: part {} has {} bytes, more than S3's {}",
                                            to_string(object), part_number, bytes, kMaxPartBytes));
  S3Request request("PUT", StorageStep::writing, object);
  request.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}};
  request.body = {static_cast<const char*>(data), bytes};
  const S3Reply reply = perform(request);
  std::string etag = reply.header("etag");
  if (etag.empty()) throw_malformed(request, reply, "no ETag for the part");
  return etag;
}

std::string S3Client::complete_multipart_upload(const ObjectUrl& object,
                                                const std::string& upload_id,
                                                const std::vector<CompletedPart>& parts) {
  const std::string body = complete_multipart_upload_body(parts);
  S3Request request("POST", StorageStep::publishing, object);
  request.query = {{"uploadId", upload_id}};
  request.headers = {"Content-Type: application/xml"};
  request.body = body;
  request.error_in_ok_reply = true;
  const S3Reply reply = perform(request);
  try {
    return parse_complete_multipart_upload_result(reply.body);
  } catch (const XmlReplyError& error) {
    throw_malformed(request, reply, error.what());
  }
}

std::vector<CompletedPart> S3Client::list_parts(const ObjectUrl& object,
                                                const std::string& upload_id) {
  S3Request request("GET", StorageStep::reading, object);
  request.query = {{"uploadId", upload_id}};
  return every_page(request, &parse_list_parts, &PartsPage::parts, [](const PartsPage& page) {
    return Query{{"part-number-marker", page.next_part_number_marker}};
  });
}

void S3Client::abort_multipart_upload(const ObjectUrl& object, const std::string& upload_id) {
  // A 404 (NoSuchUpload): gone already, by an earlier attempt or another
  // clean-up; what an abort is for is done.
  S3Request request("DELETE", StorageStep::closing, object);
  request.query = {{"uploadId", upload_id}};
  request.not_found_is_answer = true;
  perform(request);
}

std::vector<PendingUpload> S3Client::list_multipart_uploads(const std::string& bucket,
                                                            const std::string& prefix) {
  S3Request request("GET", StorageStep::reading, {bucket, ""});
  request.query = {{"uploads", ""}};
  if (!prefix.empty()) request.query["prefix"] = prefix;
  return every_page(request, &parse_list_multipart_uploads, &PendingUploadsPage::uploads,
                    [](const PendingUploadsPage& page) {
                      return Query{{"key-marker", page.next_key_marker},
                                   {"upload-id-marker", page.next_upload_id_marker}};
                    });
}

void S3Client::get_range(const ObjectUrl& object, std::uint64_t offset, std::size_t bytes,
                         void* out) {
  if (bytes == 0) return;
  S3Request request("GET", StorageStep::reading, object);
  request.range = fmt::format("{}-{}", offset, offset + bytes - 1);
  request.into = static_cast<std::byte*>(out);
  request.into_bytes = bytes;
  const S3Reply reply = perform(request);
  // A 200 is the whole object: right only from its start.
  if (reply.status != 206 && offset != 0)
    throw_malformed(request, reply, fmt::format("the store ignored the range {}", request.range));
  if (reply.received != bytes)
    throw_malformed(request, reply,
                    fmt::format("{} bytes from offset {}, not the {} asked (the object "
                                "is shorter)",
                                reply.received, offset, bytes));
}

std::string S3Client::put_object(const ObjectUrl& object, const void* data, std::size_t bytes,
                                 const ObjectMetadata& metadata) {
  if (bytes > kMaxPartBytes)
    throw std::invalid_argument(
        fmt::format("{}: {} bytes is more than S3 takes in one request ({})", to_string(object),
                    bytes, kMaxPartBytes));
  S3Request request("PUT", StorageStep::writing, object);
  request.headers = metadata_headers(metadata);
  request.body = {static_cast<const char*>(data), bytes};
  request.headers.push_back("Content-Type: application/octet-stream");
  const S3Reply reply = perform(request);
  return reply.header("etag");
}

void S3Client::delete_object(const ObjectUrl& object) {
  S3Request request("DELETE", StorageStep::closing, object);
  request.not_found_is_answer = true;
  perform(request);
}

std::vector<ObjectEntry> S3Client::list_objects(const std::string& bucket,
                                                const std::string& prefix) {
  S3Request request("GET", StorageStep::reading, {bucket, ""});
  request.query = {{"list-type", "2"}};
  if (!prefix.empty()) request.query["prefix"] = prefix;
  return every_page(request, &parse_list_objects, &ObjectsPage::objects,
                    [](const ObjectsPage& page) {
                      return Query{{"continuation-token", page.next_continuation_token}};
                    });
}

template <typename Page, typename Entry, typename Next>
std::vector<Entry> S3Client::every_page(S3Request& request, Page (*parse)(std::string_view),
                                        std::vector<Entry> Page::*entries, Next next) {
  std::vector<Entry> all;
  for (;;) {
    const S3Reply reply = perform(request);
    Page page;
    try {
      page = parse(reply.body);
    } catch (const XmlReplyError& error) {
      throw_malformed(request, reply, error.what());
    }
    all.insert(all.end(), (page.*entries).begin(), (page.*entries).end());
    if (!page.truncated) return all;
    const Query after = next(page);
    if (std::all_of(after.begin(), after.end(), [](const auto& q) { return q.second.empty(); }))
      throw_malformed(request, reply, "a truncated listing with nothing to go on from");
    for (const auto& [name, value] : after) request.query[name] = value;
  }
}

}  // namespace iotest::storage::s3
