#include "iotest/storage/s3/s3_config.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <istream>
#include <vector>

#include "iotest/common/errors.hpp"

namespace iotest::storage::s3 {

namespace {

using IniValues = std::map<std::string, std::string>;

std::string trim_blanks(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

std::string lower_case(std::string text) {
  for (char& c : text)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return text;
}

// "name = value" or "name: value" (Python's configparser takes both, and
// the AWS CLI reads its files with it): the name and the value, or
// nothing when the line has neither.
std::optional<std::pair<std::string, std::string>> split_setting(std::string_view line) {
  const auto at = line.find_first_of("=:");
  if (at == std::string_view::npos) return std::nullopt;
  std::string name = lower_case(trim_blanks(line.substr(0, at)));
  if (name.empty()) return std::nullopt;
  return std::pair{std::move(name), trim_blanks(line.substr(at + 1))};
}

}  // namespace

IniSections parse_aws_ini(std::istream& in, const std::string& file) {
  IniSections sections;
  IniValues* section = nullptr;
  std::string parent;  // the last setting, which indented lines nest under
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto malformed = [&](const char* expected) {
      // The line's number only: its text may be a key.
      return UsageError(file, fmt::format("line {}: expected {}", number, expected));
    };
    const std::string text = trim_blanks(line);
    if (text.empty() || text[0] == '#' || text[0] == ';') continue;
    const bool indented = line[0] == ' ' || line[0] == '\t';
    if (text.front() == '[') {
      if (text.back() != ']') throw malformed("'[section]'");
      section = &sections[trim_blanks(std::string_view(text).substr(1, text.size() - 2))];
      parent.clear();
      continue;
    }
    auto setting = split_setting(text);
    if (!setting) throw malformed("'[section]' or 'name = value'");
    if (!section) throw malformed("a '[section]' before its settings");
    if (indented && !parent.empty()) {
      (*section)[parent + "." + setting->first] = setting->second;
      continue;
    }
    parent = setting->second.empty() ? setting->first : "";
    (*section)[setting->first] = setting->second;
  }
  return sections;
}

std::optional<std::string> process_getenv(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  return std::string(value);
}

namespace {

// The environment as the AWS CLI reads it: a variable set empty is unset.
struct AwsEnvironment {
  const Getenv& getenv;
  std::optional<std::string> get(const char* name) const {
    auto value = getenv(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  }
};

// A value and where it came from, for the message when it is malformed.
struct Sourced {
  std::string value;
  std::string from;
};

// A file of the AWS CLI: `variable` when set (with ~ expanded), else
// `file_in_home` under $HOME; empty when neither is known.
std::string aws_file_path(const AwsEnvironment& env, const char* variable,
                          const char* file_in_home) {
  const auto home = env.get("HOME");
  if (const auto path = env.get(variable)) {
    if (home && path->rfind("~/", 0) == 0) return *home + path->substr(1);
    return *path;
  }
  return home ? *home + "/.aws/" + file_in_home : "";
}

// A file's sections; none when it does not exist (it need not).
IniSections read_aws_file(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream in(path);
  if (!in) {
    std::error_code ignored;
    if (std::filesystem::exists(path, ignored)) throw UsageError(path, "cannot be read");
    return {};
  }
  return parse_aws_ini(in, path);
}

// One profile's section of one file: where it is and its settings.
struct ProfileSection {
  std::string where;  // "/home/u/.aws/config [profile x]", or the file alone
  std::optional<IniValues> values;

  std::optional<std::string> get(const std::string& name) const {
    if (!values) return std::nullopt;
    const auto it = values->find(name);
    if (it == values->end() || it->second.empty()) return std::nullopt;
    return it->second;
  }
};

ProfileSection find_section(const std::string& path, const IniSections& sections,
                            const std::vector<std::string>& names) {
  for (const auto& name : names)
    if (const auto it = sections.find(name); it != sections.end())
      return {fmt::format("{} [{}]", path, name), it->second};
  return {path, std::nullopt};
}

// The profile's sections in both files, and the config file's other
// sections (a profile's `services` points at one).
struct AwsProfile {
  std::string name;
  ProfileSection credentials;  // [NAME] in the credentials file
  ProfileSection config;       // [profile NAME] ([default]) in the config file
  ProfileSection services;     // [services X] of the config file, X its `services`

  bool found() const { return credentials.values || config.values; }
};

AwsProfile read_profile(const AwsEnvironment& env, const std::string& name) {
  const std::string credentials_path =
      aws_file_path(env, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const std::string config_path = aws_file_path(env, "AWS_CONFIG_FILE", "config");
  const IniSections config_sections = read_aws_file(config_path);
  AwsProfile profile{
      name,
      find_section(credentials_path, read_aws_file(credentials_path), {name}),
      find_section(config_path, config_sections,
                   name == "default" ? std::vector<std::string>{"default", "profile default"}
                                     : std::vector<std::string>{"profile " + name}),
      {}};
  if (const auto services = profile.config.get("services"))
    profile.services = find_section(config_path, config_sections, {"services " + *services});
  return profile;
}

void take_credentials(const AwsEnvironment& env, const AwsProfile& profile, S3Config& config) {
  const auto key = env.get("AWS_ACCESS_KEY_ID");
  const auto secret = env.get("AWS_SECRET_ACCESS_KEY");
  if (key || secret) {
    if (!key) throw UsageError("AWS_ACCESS_KEY_ID", "not set, while AWS_SECRET_ACCESS_KEY is");
    if (!secret) throw UsageError("AWS_SECRET_ACCESS_KEY", "not set, while AWS_ACCESS_KEY_ID is");
    config.access_key_id = *key;
    config.secret_access_key = *secret;
    config.session_token = env.get("AWS_SESSION_TOKEN").value_or("");
    config.credentials_from = "environment";
    return;
  }
  // As the AWS CLI: the credentials file first, then the config file.
  for (const ProfileSection* section : {&profile.credentials, &profile.config}) {
    const auto file_key = section->get("aws_access_key_id");
    const auto file_secret = section->get("aws_secret_access_key");
    if (!file_key && !file_secret) continue;
    if (!file_key || !file_secret)
      throw UsageError(
          section->where,
          fmt::format("has {} but no {}", file_key ? "aws_access_key_id" : "aws_secret_access_key",
                      file_key ? "aws_secret_access_key" : "aws_access_key_id"));
    config.access_key_id = *file_key;
    config.secret_access_key = *file_secret;
    config.session_token = section->get("aws_session_token").value_or("");
    config.credentials_from = section->where;
    return;
  }
  throw UsageError("AWS_ACCESS_KEY_ID",
                   fmt::format("no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                               "are not set, and profile '{}' has no aws_access_key_id in {} "
                               "nor in {}",
                               profile.name, profile.credentials.where, profile.config.where));
}

// The first of the candidates that is set.
Sourced first_set(
    std::initializer_list<std::pair<std::optional<std::string>, std::string>> candidates,
    Sourced fallback) {
  for (const auto& [value, from] : candidates)
    if (value) return {*value, from};
  return fallback;
}

// The region goes into the signature's scope ("aws:amz:REGION:s3"), whose
// fields colons separate.
std::string checked_region(const Sourced& region) {
  for (char c : region.value)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      throw UsageError(region.from,
                       fmt::format("region '{}': expected letters, digits, '-' and '_' only "
                                   "(us-east-1, default)",
                                   region.value));
  return region.value;
}

std::string checked_endpoint(const Sourced& endpoint) {
  std::string url = endpoint.value;
  while (!url.empty() && url.back() == '/') url.pop_back();
  const bool http = url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
  if (!http || url.find("://") + 3 >= url.size())
    throw UsageError(
        endpoint.from,
        fmt::format("endpoint '{}': expected http://HOST[:PORT] or https://HOST[:PORT]",
                    endpoint.value));
  return url;
}

}  // namespace

S3Config load_s3_config(const Getenv& getenv) {
  const AwsEnvironment env{getenv};
  S3Config config;
  const auto named_profile = env.get("AWS_PROFILE");
  config.profile = named_profile.value_or("default");
  const AwsProfile profile = read_profile(env, config.profile);
  if (named_profile && !profile.found())
    throw UsageError("AWS_PROFILE",
                     fmt::format("profile '{}' is in neither {} nor {}", config.profile,
                                 profile.credentials.where, profile.config.where));
  take_credentials(env, profile, config);
  config.region = checked_region(first_set({{env.get("AWS_REGION"), "AWS_REGION"},
                                            {env.get("AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION"},
                                            {profile.config.get("region"), profile.config.where}},
                                           {"us-east-1", "the default region"}));
  config.endpoint = checked_endpoint(first_set(
      {{env.get("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
       {env.get("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"},
       {profile.services.get("s3.endpoint_url"), profile.services.where},
       {profile.config.get("endpoint_url"), profile.config.where}},
      {fmt::format("https://s3.{}.amazonaws.com", config.region), "the default endpoint"}));
  config.ca_bundle = first_set({{env.get("AWS_CA_BUNDLE"), "AWS_CA_BUNDLE"},
                                {profile.config.get("ca_bundle"), profile.config.where}},
                               {"", ""})
                         .value;
  return config;
}

}  // namespace iotest::storage::s3
