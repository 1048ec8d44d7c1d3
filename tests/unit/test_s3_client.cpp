// The S3 client (storage/s3/s3_client.hpp, multipart_upload.hpp): which
// failures are retried and how long it waits, and the requests it sends,
// against a small HTTP server in the test (FakeS3) that records them and
// answers as a store would: the signature's headers, the canonical query,
// retries of a busy store, a 200 that carries an error, ranged reads,
// pages of listings, and parts uploaded several at once.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "iotest/storage/s3/multipart_upload.hpp"
#include "iotest/storage/s3/s3_client.hpp"

namespace iotest::storage::s3 {
namespace {

constexpr const char* kTestSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

// CURLcode values (stable in libcurl's ABI; the test does not include
// curl.h, which need not be on its include path).
constexpr int kCouldntResolveHost = 6, kCouldntConnect = 7, kOperationTimedOut = 28,
              kAbortedByCallback = 42, kGotNothing = 52, kRecvError = 56,
              kPeerFailedVerification = 60;

TEST(S3Retry, BusyOrFailingStoresAreRetriedWrongRequestsAreNot) {
  EXPECT_TRUE(retryable_reply(500, "InternalError"));
  EXPECT_TRUE(retryable_reply(503, "SlowDown"));
  EXPECT_TRUE(retryable_reply(502, "BadGateway"));  // a proxy's page, no S3 code
  EXPECT_TRUE(retryable_reply(429, ""));
  EXPECT_TRUE(retryable_reply(400, "RequestTimeout"));
  EXPECT_TRUE(retryable_reply(200, "InternalError"));  // CompleteMultipartUpload's 200
  EXPECT_FALSE(retryable_reply(403, "AccessDenied"));
  EXPECT_FALSE(retryable_reply(403, "SignatureDoesNotMatch"));
  EXPECT_FALSE(retryable_reply(404, "NoSuchBucket"));
  EXPECT_FALSE(retryable_reply(400, "EntityTooSmall"));
  EXPECT_FALSE(retryable_reply(403, "RequestTimeTooSkewed"));
  EXPECT_FALSE(retryable_reply(403, "QuotaExceeded"));  // radosgw's quota
}

TEST(S3Retry, DroppedConnectionsAreRetriedMisconfigurationIsNot) {
  for (int code : {kCouldntConnect, kOperationTimedOut, kGotNothing, kRecvError})
    EXPECT_TRUE(retryable_transport(code)) << code;
  for (int code : {kCouldntResolveHost, kPeerFailedVerification, kAbortedByCallback})
    EXPECT_FALSE(retryable_transport(code)) << code;
}

TEST(S3Retry, BackoffDoublesWithinItsBoundWithJitter) {
  const RetryPolicy policy;  // 200 ms, doubling, at most 5 s
  std::mt19937_64 random(42);
  std::set<std::int64_t> seen;
  for (int i = 0; i < 100; ++i) {
    const auto first = backoff_delay(policy, 1, random).count();
    EXPECT_GE(first, 100);
    EXPECT_LE(first, 200);
    const auto third = backoff_delay(policy, 3, random).count();
    EXPECT_GE(third, 400);
    EXPECT_LE(third, 800);
    const auto late = backoff_delay(policy, 1000, random).count();  // no overflow
    EXPECT_GE(late, 2500);
    EXPECT_LE(late, 5000);
    seen.insert(third);
  }
  EXPECT_GT(seen.size(), 50u);  // jittered, not one value
}

TEST(S3Retry, AnErrorSaysWhatFailedWhereAndHowOften) {
  S3Error::Details details;
  details.method = "PUT";
  details.endpoint = "http://10.99.0.1:7480";
  details.bucket = "ska-vis";
  details.key = "run-7/out0.ms";
  details.http_status = 503;
  details.code = "SlowDown";
  details.message = "Please reduce your request rate.";
  details.request_id = "tx00001";
  details.retryable = true;
  details.attempts = 5;
  const S3Error error(details);
  EXPECT_STREQ(error.what(),
               "S3 PUT s3://ska-vis/run-7/out0.ms at http://10.99.0.1:7480: 503 SlowDown: Please "
               "reduce your request rate. (request tx00001, 5 attempts)");
  S3Error::Details no_reply;
  no_reply.method = "HEAD";
  no_reply.endpoint = "http://127.0.0.1:1";
  no_reply.bucket = "b0b";
  no_reply.code = "Couldn't connect to server";
  no_reply.message = "Failed to connect to 127.0.0.1 port 1";
  const S3Error refused(no_reply);
  EXPECT_STREQ(refused.what(),
               "S3 HEAD s3://b0b at http://127.0.0.1:1: no reply (Couldn't connect to server): "
               "Failed to connect to 127.0.0.1 port 1 (1 attempt)");
}

// A request as the fake store saw it.
struct SeenRequest {
  std::string method;
  std::string target;                          // path and query, as sent
  std::map<std::string, std::string> headers;  // names lower case
  std::string head;                            // the request line and headers, raw
  std::string body;
};

struct CannedReply {
  CannedReply(int status_ = 200, std::string body_ = "", std::vector<std::string> headers_ = {})
      : status(status_), body(std::move(body_)), headers(std::move(headers_)) {}
  static CannedReply dropped() {
    CannedReply reply;
    reply.drop = true;
    return reply;
  }
  int status;
  std::string body;                  // for HEAD: only its length is sent
  std::vector<std::string> headers;  // "Name: value"
  bool drop = false;                 // close the connection with no reply
};

// An HTTP/1.1 server on 127.0.0.1 that answers each request with what
// `answer` makes of it (called from a thread per connection).
class FakeS3 {
 public:
  using Answer = std::function<CannedReply(const SeenRequest&)>;
  // `server`: its Server header; empty: none (radosgw's way).
  explicit FakeS3(Answer answer, std::string server = "FakeS3/1.0")
      : answer_(std::move(answer)), server_(std::move(server)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        listen(listener_, 16) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("FakeS3: no socket");
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_connections(); });
  }
  ~FakeS3() {
    shutdown(listener_, SHUT_RDWR);  // accept() returns
    acceptor_.join();
    {
      std::lock_guard lock(lock_);
      for (int fd : open_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& thread : servers_) thread.join();
    close(listener_);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<SeenRequest> seen() const {
    std::lock_guard lock(lock_);
    return seen_;
  }
  int connections() const { return connections_; }

 private:
  void accept_connections() {
    for (;;) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard lock(lock_);
      open_.insert(fd);
      ++connections_;
      servers_.emplace_back([this, fd] { serve(fd); });
    }
  }
  static bool read_more(int fd, std::string& buffer) {
    char chunk[65536];
    const ssize_t got = recv(fd, chunk, sizeof chunk, 0);
    if (got <= 0) return false;
    buffer.append(chunk, static_cast<std::size_t>(got));
    return true;
  }
  static void send_all(int fd, const std::string& text) {
    for (std::size_t sent = 0; sent < text.size();) {
      const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }
  static SeenRequest parse_head(const std::string& head) {
    SeenRequest request;
    request.head = head;
    const auto line_end = head.find("\r\n");
    const std::string line = head.substr(0, line_end);
    request.method = line.substr(0, line.find(' '));
    request.target = line.substr(line.find(' ') + 1, line.rfind(' ') - line.find(' ') - 1);
    for (std::size_t at = line_end + 2; at < head.size();) {
      const auto end = std::min(head.find("\r\n", at), head.size());
      const std::string header = head.substr(at, end - at);
      const auto colon = header.find(':');
      std::string name = header.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      request.headers[name] = header.substr(header.find_first_not_of(' ', colon + 1));
      at = end + 2;
    }
    return request;
  }
  void serve(int fd) {
    std::string buffer;
    for (;;) {
      std::size_t end;
      while ((end = buffer.find("\r\n\r\n")) == std::string::npos)
        if (!read_more(fd, buffer)) return finish(fd);
      SeenRequest request = parse_head(buffer.substr(0, end));
      buffer.erase(0, end + 4);
      if (request.headers.count("transfer-encoding")) ADD_FAILURE() << "a chunked request";
      if (request.headers["expect"] == "100-continue")
        send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n");
      const std::size_t length = request.headers.count("content-length")
                                     ? std::stoul(request.headers["content-length"])
                                     : 0;
      while (buffer.size() < length)
        if (!read_more(fd, buffer)) return finish(fd);
      request.body = buffer.substr(0, length);
      buffer.erase(0, length);
      {
        std::lock_guard lock(lock_);
        seen_.push_back(request);
      }
      const CannedReply reply = answer_(request);
      if (reply.drop) return finish(fd);
      std::string text = fmt::format(
          "HTTP/1.1 {} Canned\r\n{}x-amz-request-id: tx{}\r\nContent-Length: {}\r\n", reply.status,
          server_.empty() ? "" : "Server: " + server_ + "\r\n", seen().size(), reply.body.size());
      for (const auto& header : reply.headers) text += header + "\r\n";
      text += "\r\n";
      if (request.method != "HEAD") text += reply.body;
      send_all(fd, text);
    }
  }
  void finish(int fd) {
    std::lock_guard lock(lock_);
    if (open_.erase(fd)) close(fd);
  }

  Answer answer_;
  std::string server_;
  int listener_ = -1;
  int port_ = 0;
  mutable std::mutex lock_;
  std::vector<SeenRequest> seen_;
  std::set<int> open_;
  std::atomic<int> connections_{0};
  std::vector<std::thread> servers_;
  std::thread acceptor_;
};

S3Config fake_config(const FakeS3& store) {
  S3Config config;
  config.endpoint = store.endpoint();
  config.region = "default";
  config.access_key_id = "AKIDTEST";
  config.secret_access_key = kTestSecret;
  config.session_token = "session-token-1";
  config.credentials_from = "environment";
  return config;
}

RetryPolicy quick_retries(int attempts = 5) {
  RetryPolicy policy;
  policy.attempts = attempts;
  policy.first_backoff = std::chrono::milliseconds(1);
  policy.max_backoff = std::chrono::milliseconds(4);
  policy.stall_timeout = std::chrono::seconds(5);
  return policy;
}

std::string error_xml(const std::string& code, const std::string& message) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code + "</Code><Message>" +
         message + "</Message><RequestId>tx-error</RequestId></Error>";
}

// A part's ETag, as the fake store makes it from the part's number.
CannedReply part_stored(const SeenRequest& request) {
  const auto at = request.target.find("partNumber=") + std::strlen("partNumber=");
  const int number = std::stoi(request.target.substr(at));
  return {200, "", {fmt::format("ETag: \"etag-{}\"", number)}};
}

TEST(S3Client, AMultipartUploadSignedAndInCanonicalForm) {
  FakeS3 store([](const SeenRequest& request) -> CannedReply {
    if (request.method == "POST" && request.target.ends_with("?uploads="))
      return {200,
              "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
              "<Bucket>ska-vis</Bucket><Key>k</Key><UploadId>2~xyz/+</UploadId>"
              "</InitiateMultipartUploadResult>"};
    if (request.method == "PUT") return part_stored(request);
    return {200,
            "<CompleteMultipartUploadResult><ETag>\"whole-2\"</ETag>"
            "</CompleteMultipartUploadResult>"};
  });
  S3Client client(fake_config(store), quick_retries());
  const ObjectUrl object{"ska-vis", "run 7/out0.ms"};
  const std::string upload_id = client.create_multipart_upload(object, {{"iotest-run", "r42"}});
  EXPECT_EQ(upload_id, "2~xyz/+");
  const std::string data(1000, 'v');
  const std::string etag1 = client.upload_part(object, upload_id, 1, data.data(), data.size());
  const std::string etag2 = client.upload_part(object, upload_id, 2, data.data(), 10);
  EXPECT_EQ(etag1, "\"etag-1\"");
  EXPECT_EQ(client.complete_multipart_upload(object, upload_id, {{1, etag1}, {2, etag2}}),
            "\"whole-2\"");
  EXPECT_EQ(client.server(), "FakeS3/1.0");
  EXPECT_EQ(client.requests(), 4);
  EXPECT_EQ(client.retries(), 0);

  const auto seen = store.seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(store.connections(), 1);  // one connection, kept alive
  EXPECT_EQ(seen[0].target, "/ska-vis/run%207/out0.ms?uploads=");
  EXPECT_EQ(seen[0].headers.at("x-amz-meta-iotest-run"), "r42");
  EXPECT_EQ(seen[1].method, "PUT");
  EXPECT_EQ(seen[1].target, "/ska-vis/run%207/out0.ms?partNumber=1&uploadId=2~xyz%2F%2B");
  EXPECT_EQ(seen[1].body, data);
  EXPECT_EQ(seen[2].body, data.substr(0, 10));
  EXPECT_EQ(seen[3].method, "POST");
  EXPECT_EQ(seen[3].target, "/ska-vis/run%207/out0.ms?uploadId=2~xyz%2F%2B");
  EXPECT_EQ(parse_complete_multipart_upload(seen[3].body),
            (std::vector<CompletedPart>{{1, "\"etag-1\""}, {2, "\"etag-2\""}}));
  for (const auto& request : seen) {
    EXPECT_EQ(request.headers.at("x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
    EXPECT_EQ(request.headers.at("x-amz-security-token"), "session-token-1");
    const std::string& authorization = request.headers.at("authorization");
    EXPECT_EQ(authorization.rfind("AWS4-HMAC-SHA256 Credential=AKIDTEST/", 0), 0u) << authorization;
    EXPECT_NE(authorization.find("/default/s3/aws4_request"), std::string::npos) << authorization;
    EXPECT_EQ(request.head.find(kTestSecret), std::string::npos);
  }
}

TEST(S3Client, ABusyStoreIsRetried) {
  std::atomic<int> calls{0};
  FakeS3 store([&](const SeenRequest& request) -> CannedReply {
    // A connection closed with no reply (on a fresh connection: libcurl
    // itself sends again only on a reused one), then a busy store.
    if (++calls == 1) return CannedReply::dropped();
    if (calls == 2) return {503, error_xml("SlowDown", "Please reduce your request rate.")};
    return part_stored(request);
  });
  S3Client client(fake_config(store), quick_retries());
  EXPECT_EQ(client.upload_part({"ska-vis", "k"}, "u", 7, "abc", 3), "\"etag-7\"");
  EXPECT_EQ(client.requests(), 3);
  EXPECT_EQ(client.retries(), 2);
  for (const auto& request : store.seen()) EXPECT_EQ(request.body, "abc");  // sent again whole
}

TEST(S3Client, RetriesAreBounded) {
  FakeS3 store([](const SeenRequest&) -> CannedReply {
    return {500, error_xml("InternalError", "We encountered an internal error.")};
  });
  S3Client client(fake_config(store), quick_retries(3));
  try {
    client.put_object({"ska-vis", "k"}, "abc", 3);
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_EQ(error.http_status(), 500);
    EXPECT_EQ(error.code(), "InternalError");
    EXPECT_TRUE(error.retryable());
    EXPECT_EQ(error.details().attempts, 3);
    EXPECT_EQ(error.details().request_id, "tx-error");
  }
  EXPECT_EQ(client.requests(), 3);
  EXPECT_EQ(client.retries(), 2);
}

TEST(S3Client, AWrongKeyIsNotRetriedAndTheSecretIsNeverSaid) {
  FakeS3 store([](const SeenRequest& request) -> CannedReply {
    if (request.method == "HEAD") return {403};
    return {403, error_xml("SignatureDoesNotMatch",
                           "The request signature we calculated does "
                           "not match the signature you provided.")};
  });
  S3Client client(fake_config(store), quick_retries());
  try {
    client.delete_object({"ska-vis", "k"});
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_EQ(error.code(), "SignatureDoesNotMatch");
    EXPECT_FALSE(error.retryable());
    EXPECT_EQ(std::string(error.what()).find(kTestSecret), std::string::npos);
  }
  try {
    client.head_bucket("ska-vis");
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_EQ(error.code(), "AccessDenied");
    EXPECT_NE(std::string(error.what()).find("the access key (from environment) is wrong"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(client.requests(), 2);
}

TEST(S3Client, HeadsOfBucketsAndObjects) {
  FakeS3 store([](const SeenRequest& request) -> CannedReply {
    if (request.target == "/nosuch") return {404};
    if (request.target == "/ska-vis/missing") return {404};
    if (request.target == "/ska-vis/present")
      return {200, std::string(1234, 'x'), {"ETag: \"e-1234\""}};
    return {200};
  });
  S3Client client(fake_config(store), quick_retries());
  EXPECT_NO_THROW(client.head_bucket("ska-vis"));
  try {
    client.head_bucket("nosuch");
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_EQ(error.code(), "NoSuchBucket");
    EXPECT_EQ(error.http_status(), 404);
  }
  EXPECT_FALSE(client.head_object({"ska-vis", "missing"}));
  const auto head = client.head_object({"ska-vis", "present"});
  ASSERT_TRUE(head);
  EXPECT_EQ(head->size, 1234);
  EXPECT_EQ(head->etag, "\"e-1234\"");
  EXPECT_EQ(client.retries(), 0);
}

TEST(S3Client, RadosgwIsNamedWithoutAServerHeader) {
  FakeS3 store(
      [](const SeenRequest& request) -> CannedReply {
        if (request.method == "HEAD") return {200, "", {"X-RGW-Object-Count: 0"}};
        return {200, "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>"};
      },
      "");
  S3Client client(fake_config(store), quick_retries());
  client.list_objects("ska-vis");
  EXPECT_EQ(client.server(), "");  // not named yet
  client.head_bucket("ska-vis");
  EXPECT_EQ(client.server(), "Ceph Object Gateway");
  client.list_objects("ska-vis");
  EXPECT_EQ(client.server(), "Ceph Object Gateway");  // kept
}

TEST(S3Client, ACompletionThatFailsWithA200) {
  // S3 may answer CompleteMultipartUpload 200 and then an <Error> body.
  std::atomic<int> calls{0};
  FakeS3 store([&](const SeenRequest&) -> CannedReply {
    if (++calls == 1) return {200, error_xml("InternalError", "try again")};
    if (calls == 2)
      return {200,
              "<CompleteMultipartUploadResult><ETag>\"w\"</ETag></CompleteMultipartUploadResult>"};
    return {200,
            error_xml("InvalidPart", "One or more of the specified parts could not be found.")};
  });
  S3Client client(fake_config(store), quick_retries());
  EXPECT_EQ(client.complete_multipart_upload({"ska-vis", "k"}, "u", {{1, "\"e\""}}), "\"w\"");
  EXPECT_EQ(client.retries(), 1);
  try {
    client.complete_multipart_upload({"ska-vis", "k"}, "u", {{1, "\"e\""}});
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_EQ(error.http_status(), 200);
    EXPECT_EQ(error.code(), "InvalidPart");
    EXPECT_FALSE(error.retryable());
  }
}

TEST(S3Client, RangedReadsGetExactlyWhatWasAsked) {
  const std::string object(300, 'o');
  FakeS3 store([&](const SeenRequest& request) -> CannedReply {
    if (request.target == "/ska-vis/short") return {206, "abc"};
    if (request.target == "/ska-vis/norange") return {200, object};
    return {206, "12345"};
  });
  S3Client client(fake_config(store), quick_retries());
  char out[5] = {};
  client.get_range({"ska-vis", "k"}, 100, 5, out);
  EXPECT_EQ(std::string(out, 5), "12345");
  EXPECT_EQ(store.seen().back().headers.at("range"), "bytes=100-104");
  try {
    client.get_range({"ska-vis", "short"}, 0, 5, out);
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_NE(std::string(error.what()).find("3 bytes from offset 0, not the 5 asked"),
              std::string::npos)
        << error.what();
  }
  // A store that ignores the range sends the whole object: more than asked.
  EXPECT_THROW(client.get_range({"ska-vis", "norange"}, 10, 5, out), S3Error);
  client.get_range({"ska-vis", "k"}, 0, 0, out);  // nothing asked, nothing sent
  EXPECT_EQ(store.seen().size(), 3u);
}

TEST(S3Client, ListingsFollowTheirPages) {
  FakeS3 store([](const SeenRequest& request) -> CannedReply {
    if (request.target.find("uploadId=2~p") != std::string::npos) {
      if (request.target.find("part-number-marker") == std::string::npos)
        return {200,
                "<ListPartsResult><IsTruncated>true</IsTruncated>"
                "<NextPartNumberMarker>1</NextPartNumberMarker>"
                "<Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag></Part></ListPartsResult>"};
      return {200,
              "<ListPartsResult><IsTruncated>false</IsTruncated>"
              "<Part><PartNumber>2</PartNumber><ETag>\"e2\"</ETag></Part></ListPartsResult>"};
    }
    if (request.target.find("uploads=") != std::string::npos) {
      if (request.target.find("key-marker") == std::string::npos)
        return {200,
                "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>"
                "<NextKeyMarker>a</NextKeyMarker><NextUploadIdMarker>2~u</NextUploadIdMarker>"
                "<Upload><Key>a</Key><UploadId>2~u</UploadId></Upload>"
                "</ListMultipartUploadsResult>"};
      return {200,
              "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
              "<Upload><Key>b</Key><UploadId>2~v</UploadId></Upload>"
              "</ListMultipartUploadsResult>"};
    }
    if (request.target.find("continuation-token") == std::string::npos)
      return {200,
              "<ListBucketResult><IsTruncated>true</IsTruncated>"
              "<NextContinuationToken>t/1+=</NextContinuationToken>"
              "<Contents><Key>run/a</Key><Size>1</Size></Contents>"
              "<Contents><Key>run/b</Key><Size>2</Size></Contents></ListBucketResult>"};
    return {200,
            "<ListBucketResult><IsTruncated>false</IsTruncated>"
            "<Contents><Key>run/c</Key><Size>3</Size></Contents></ListBucketResult>"};
  });
  S3Client client(fake_config(store), quick_retries());
  const auto objects = client.list_objects("ska-vis", "run/");
  ASSERT_EQ(objects.size(), 3u);
  EXPECT_EQ(objects[2].key, "run/c");
  EXPECT_EQ(objects[2].size, 3);
  const auto uploads = client.list_multipart_uploads("ska-vis");
  ASSERT_EQ(uploads.size(), 2u);
  EXPECT_EQ(uploads[1].upload_id, "2~v");
  EXPECT_EQ(client.list_parts({"ska-vis", "k"}, "2~p"),
            (std::vector<CompletedPart>{{1, "\"e1\""}, {2, "\"e2\""}}));
  const auto seen = store.seen();
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[5].target, "/ska-vis/k?part-number-marker=1&uploadId=2~p");
  EXPECT_EQ(seen[0].target, "/ska-vis?list-type=2&prefix=run%2F");
  EXPECT_EQ(seen[1].target, "/ska-vis?continuation-token=t%2F1%2B%3D&list-type=2&prefix=run%2F");
  EXPECT_EQ(seen[2].target, "/ska-vis?uploads=");
  EXPECT_EQ(seen[3].target, "/ska-vis?key-marker=a&upload-id-marker=2~u&uploads=");
}

TEST(S3Client, NoStoreThereIsRetriedThenSaid) {
  // A port nothing listens on: the connection is refused at once.
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(probe);
  S3Config config;
  config.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  config.region = "us-east-1";
  config.access_key_id = "AKIDTEST";
  config.secret_access_key = kTestSecret;
  S3Client client(config, quick_retries(2));
  try {
    client.head_object({"ska-vis", "k"});
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_EQ(error.http_status(), 0);
    EXPECT_TRUE(error.retryable());
    EXPECT_EQ(error.details().attempts, 2);
    EXPECT_NE(std::string(error.what()).find("no reply"), std::string::npos) << error.what();
  }
  EXPECT_EQ(client.retries(), 1);
}

TEST(S3Client, MetadataAndPartNumbersAreChecked) {
  S3Config config;
  config.endpoint = "http://127.0.0.1:9";
  config.region = "us-east-1";
  S3Client client(config, quick_retries(1));
  EXPECT_THROW(client.create_multipart_upload({"ska-vis", "k"}, {{"bad name", "v"}}),
               std::invalid_argument);
  EXPECT_THROW(client.create_multipart_upload({"ska-vis", "k"}, {{"run", "a\r\nX-Evil: 1"}}),
               std::invalid_argument);
  EXPECT_THROW(client.upload_part({"ska-vis", "k"}, "u", 0, "a", 1), std::invalid_argument);
  EXPECT_THROW(client.upload_part({"ska-vis", "k"}, "u", kMaxParts + 1, "a", 1),
               std::invalid_argument);
  EXPECT_EQ(client.requests(), 0);
}

std::vector<std::byte> part_of(std::size_t bytes, char fill) {
  return std::vector<std::byte>(bytes, static_cast<std::byte>(fill));
}

TEST(S3Multipart, PartsGoSeveralAtOnceAndComeBackInOrder) {
  std::atomic<int> in_flight{0}, most_in_flight{0};
  FakeS3 store([&](const SeenRequest& request) {
    const int now = ++in_flight;
    for (int seen = most_in_flight;
         now > seen && !most_in_flight.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    --in_flight;
    return part_stored(request);
  });
  ProgressTable table;
  MultipartUpload upload(fake_config(store), {"ska-vis", "run-7/out0.ms"}, "2~u", 2,
                         quick_retries(), &table);
  const std::size_t five_mib = kMinPartBytes;
  upload.add_part(part_of(five_mib, 'a'));
  upload.add_part(part_of(five_mib, 'b'));
  upload.add_part(part_of(five_mib, 'c'));
  upload.add_part(part_of(1000, 'd'));  // the last may be small
  const auto parts = upload.finish();
  ASSERT_EQ(parts.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(parts[i].part_number, i + 1);
    EXPECT_EQ(parts[i].etag, fmt::format("\"etag-{}\"", i + 1));
  }
  EXPECT_EQ(upload.bytes_sent(), static_cast<std::int64_t>(3 * five_mib + 1000));
  EXPECT_EQ(upload.requests(), 4);
  EXPECT_EQ(upload.retries(), 0);
  EXPECT_GE(upload.request_seconds(), 4 * 0.05 * 0.9);
  EXPECT_EQ(upload.server(), "FakeS3/1.0");
  EXPECT_EQ(most_in_flight, 2);  // two at once, never more
  std::set<std::string> bodies;
  for (const auto& request : store.seen()) {
    EXPECT_NE(request.target.find("uploadId=2~u"), std::string::npos);
    bodies.insert(request.body.substr(0, 1) + std::to_string(request.body.size()));
  }
  EXPECT_EQ(bodies, (std::set<std::string>{"a5242880", "b5242880", "c5242880", "d1000"}));
  EXPECT_FALSE(table.stalled(steady_ns() + 1'000'000'000'000, 1));  // the workers left the table
}

TEST(S3Multipart, OnlyTheLastPartMayBeSmall) {
  FakeS3 store(part_stored);
  MultipartUpload upload(fake_config(store), {"ska-vis", "k"}, "u", 1, quick_retries());
  upload.add_part(part_of(1000, 'a'));
  try {
    upload.add_part(part_of(1000, 'b'));
    ADD_FAILURE() << "taken";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "s3://ska-vis/k: part 2: part 1 has 1000 bytes; only the last part "
                 "may be under S3's 5242880 (5 MiB)");
  }
  EXPECT_EQ(upload.finish().size(), 1u);
  EXPECT_THROW(upload.add_part(part_of(1, 'c')), std::logic_error);  // finished
}

TEST(S3Multipart, AFailedPartIsRethrown) {
  FakeS3 store([](const SeenRequest& request) -> CannedReply {
    if (request.target.find("partNumber=2") != std::string::npos)
      return {403, error_xml("QuotaExceeded", "quota")};
    return part_stored(request);
  });
  MultipartUpload upload(fake_config(store), {"ska-vis", "k"}, "u", 2, quick_retries());
  try {
    for (char c : {'a', 'b', 'c', 'd', 'e', 'f'}) upload.add_part(part_of(kMinPartBytes, c));
    upload.finish();
    ADD_FAILURE() << "no error";
  } catch (const S3Error& error) {
    EXPECT_EQ(error.code(), "QuotaExceeded");
    EXPECT_EQ(error.details().key, "k");
  }
  upload.abort();
}

}  // namespace
}  // namespace iotest::storage::s3
