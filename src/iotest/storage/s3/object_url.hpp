// Where an object lives on an S3 store: `s3://BUCKET/KEY`, the form the
// AWS CLI, rclone and s3cmd take. The endpoint is not part of it: it comes
// from the S3 configuration (s3_config.hpp), as with the AWS CLI.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace iotest::storage::s3 {

struct ObjectUrl {
  std::string bucket;
  std::string key;  // empty: the bucket itself
  bool operator==(const ObjectUrl&) const = default;
};

// Whether `url` is meant for S3 (starts with s3://), valid or not.
bool is_s3_url(std::string_view url);

// s3://BUCKET[/KEY]. A malformed URL or a bucket name S3 refuses is a
// UsageError naming `option`.
ObjectUrl parse_s3_url(const std::string& url, const std::string& option);

// "s3://BUCKET/KEY" ("s3://BUCKET" for a bucket).
std::string to_string(const ObjectUrl& object);

// The bucket name rules of AWS (3-63 lower-case letters, digits, dots and
// hyphens, ...): empty when `bucket` keeps them, else what it breaks.
std::string bucket_name_problem(std::string_view bucket);

// SigV4's URI encoding: every byte but A-Z a-z 0-9 - . _ ~ as %XX (upper
// case hex), and '/' kept in a path. Requests are sent already in the form
// the signature covers, since libcurl 7.88 signs the URL as given.
std::string uri_encode(std::string_view text, bool keep_slash);

// A canonical query string: names sorted, names and values URI-encoded,
// '=' after every name, even with no value ("uploads="): libcurl 7.88
// signs the query as written and S3 checks it in canonical form.
std::string canonical_query(const std::map<std::string, std::string>& parameters);

}  // namespace iotest::storage::s3
