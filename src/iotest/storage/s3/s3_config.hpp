// Where the S3 store is and who we are to it, found as the AWS CLI finds
// them, so a site's existing set-up (environment, ~/.aws files, profiles)
// works unchanged: the environment first, then the profile's sections of
// ~/.aws/credentials and ~/.aws/config, then AWS's defaults.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>

namespace iotest::storage::s3 {

struct S3Config {
  std::string endpoint;  // "https://s3.us-east-1.amazonaws.com", no '/' at the end
  std::string region;    // signed into every request
  std::string access_key_id;
  std::string secret_access_key;  // never in a message, an exception or a log line
  std::string session_token;      // temporary credentials; empty: none
  std::string ca_bundle;          // the CA file to trust; empty: libcurl's default
  std::string profile;            // the AWS profile looked up ("default" unless AWS_PROFILE)
  // Where the keys came from, for messages and the report: "environment",
  // or a file and its section ("/home/u/.aws/credentials [default]").
  std::string credentials_from;
};

using Getenv = std::function<std::optional<std::string>(const char*)>;
// The process's environment (std::getenv).
std::optional<std::string> process_getenv(const char* name);

// The configuration from the environment `getenv` reads (the tests give
// their own) and the files it names. Missing credentials, a profile named
// but found nowhere, or a malformed value: a UsageError naming the
// variable or file at fault, never with the secret in it.
S3Config load_s3_config(const Getenv& getenv = process_getenv);

// An AWS configuration file: sections of name = value pairs, names lower
// case. A nested setting ("s3 =" then indented "endpoint_url = ...") is
// kept as "s3.endpoint_url". A malformed line is a UsageError naming
// `file` and the line's number, not its text (it may hold a secret).
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
IniSections parse_aws_ini(std::istream& in, const std::string& file);

}  // namespace iotest::storage::s3
