#include "iotest/storage/s3/object_url.hpp"

#include <fmt/format.h>

#include "iotest/common/errors.hpp"

namespace iotest::storage::s3 {

namespace {

constexpr std::string_view kScheme = "s3://";
constexpr std::size_t kMaxKeyBytes = 1024;  // S3's limit on a key, in UTF-8 bytes

bool is_bucket_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

bool is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// 192.168.5.4: S3 refuses bucket names that read as an IPv4 address.
bool looks_like_ipv4(std::string_view name) {
  int dots = 0;
  for (char c : name) {
    if (c == '.')
      ++dots;
    else if (c < '0' || c > '9')
      return false;
  }
  return dots == 3;
}

}  // namespace

bool is_s3_url(std::string_view url) {
  return url.substr(0, kScheme.size()) == kScheme;
}

std::string bucket_name_problem(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return "a bucket name has 3 to 63 characters";
  for (char c : bucket)
    if (!is_bucket_char(c))
      return "a bucket name has only lower-case letters, digits, dots and hyphens";
  if (!is_lower_alnum(bucket.front()) || !is_lower_alnum(bucket.back()))
    return "a bucket name begins and ends with a letter or a digit";
  if (bucket.find("..") != std::string_view::npos) return "a bucket name has no two dots in a row";
  if (looks_like_ipv4(bucket)) return "a bucket name is not an IP address";
  if (bucket.substr(0, 4) == "xn--") return "a bucket name does not begin with 'xn--'";
  return "";
}

ObjectUrl parse_s3_url(const std::string& url, const std::string& option) {
  const auto expected = [&](const std::string& why) {
    return UsageError(option, fmt::format("'{}': {} (expected s3://BUCKET/KEY)", url, why));
  };
  if (!is_s3_url(url)) throw expected("not an s3:// URL");
  const std::string_view rest = std::string_view(url).substr(kScheme.size());
  const auto slash = rest.find('/');
  ObjectUrl object;
  object.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) object.key = std::string(rest.substr(slash + 1));
  if (object.bucket.empty()) throw expected("no bucket");
  if (const auto problem = bucket_name_problem(object.bucket); !problem.empty())
    throw expected(problem);
  if (object.key.size() > kMaxKeyBytes)
    throw expected(fmt::format("a key has at most {} bytes", kMaxKeyBytes));
  return object;
}

std::string to_string(const ObjectUrl& object) {
  std::string url = std::string(kScheme) + object.bucket;
  if (!object.key.empty()) url += "/" + object.key;
  return url;
}

std::string uri_encode(std::string_view text, bool keep_slash) {
  std::string encoded;
  encoded.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    // Not std::isalnum: it follows the locale, and SigV4 does not.
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (alnum || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/'))
      encoded += c;
    else
      encoded += fmt::format("%{:02X}", byte);
  }
  return encoded;
}

std::string canonical_query(const std::map<std::string, std::string>& parameters) {
  // A std::map is already in byte order of its names, as SigV4 sorts them.
  std::string query;
  for (const auto& [name, value] : parameters) {
    if (!query.empty()) query += '&';
    query += uri_encode(name, false) + "=" + uri_encode(value, false);
  }
  return query;
}

}  // namespace iotest::storage::s3
