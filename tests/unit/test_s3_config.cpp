// The S3 configuration (storage/s3/s3_config.hpp), found as the AWS CLI
// finds it: from a fake environment and credentials and config files in a
// scratch folder, so nothing of this machine's own set-up leaks in.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "iotest/common/errors.hpp"
#include "iotest/storage/s3/s3_config.hpp"

namespace iotest::storage::s3 {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

// A home folder of its own for each test, and an environment of its own.
class S3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "iotest-s3-config-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    home_ = pattern;
    fs::create_directories(home_ / ".aws");
    env_["HOME"] = home_.string();
  }
  void TearDown() override { fs::remove_all(home_); }

  void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }
  S3Config load() {
    return load_s3_config([this](const char* name) -> std::optional<std::string> {
      const auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    });
  }
  // The UsageError load() throws (a failure when none).
  UsageError load_error() {
    try {
      load();
    } catch (const UsageError& error) {
      EXPECT_EQ(std::string(error.what()).find(kSecret), std::string::npos) << error.what();
      return error;
    }
    ADD_FAILURE() << "no UsageError";
    return UsageError("", "");
  }

  fs::path home_;
  std::map<std::string, std::string> env_;
};

TEST_F(S3ConfigTest, CredentialsFromTheEnvironmentAndAwsDefaults) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIDEXAMPLE";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  env_["AWS_SESSION_TOKEN"] = "token-1";
  const S3Config config = load();
  EXPECT_EQ(config.access_key_id, "AKIDEXAMPLE");
  EXPECT_EQ(config.secret_access_key, kSecret);
  EXPECT_EQ(config.session_token, "token-1");
  EXPECT_EQ(config.credentials_from, "environment");
  EXPECT_EQ(config.profile, "default");
  EXPECT_EQ(config.region, "us-east-1");
  EXPECT_EQ(config.endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_EQ(config.ca_bundle, "");
}

TEST_F(S3ConfigTest, TheDefaultEndpointFollowsTheRegion) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIDEXAMPLE";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  env_["AWS_DEFAULT_REGION"] = "eu-west-2";
  EXPECT_EQ(load().endpoint, "https://s3.eu-west-2.amazonaws.com");
}

TEST_F(S3ConfigTest, AProfileFromBothFiles) {
  write(home_ / ".aws/credentials",
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = other\n\n"
        "# the test cluster's gateway\n[radosgw]\naws_access_key_id = AKIDRGW\n"
        "aws_secret_access_key = " +
            std::string(kSecret) + "\n");
  write(home_ / ".aws/config",
        "[default]\nregion = eu-west-1\n\n[profile radosgw]\nregion = default\n"
        "endpoint_url = http://10.99.0.1:7480/\nca_bundle = /etc/ceph/ca.pem\n");
  env_["AWS_PROFILE"] = "radosgw";
  const S3Config config = load();
  EXPECT_EQ(config.profile, "radosgw");
  EXPECT_EQ(config.access_key_id, "AKIDRGW");
  EXPECT_EQ(config.secret_access_key, kSecret);
  EXPECT_EQ(config.session_token, "");
  EXPECT_EQ(config.credentials_from, (home_ / ".aws/credentials").string() + " [radosgw]");
  EXPECT_EQ(config.region, "default");
  EXPECT_EQ(config.endpoint, "http://10.99.0.1:7480");
  EXPECT_EQ(config.ca_bundle, "/etc/ceph/ca.pem");
}

TEST_F(S3ConfigTest, TheDefaultProfileWithoutAwsProfile) {
  write(home_ / ".aws/credentials",
        "[default]\naws_access_key_id=AKIDDEFAULT\n"
        "aws_secret_access_key=s\naws_session_token=t\n");
  write(home_ / ".aws/config", "[default]\nregion = eu-west-1\n");
  const S3Config config = load();
  EXPECT_EQ(config.access_key_id, "AKIDDEFAULT");
  EXPECT_EQ(config.session_token, "t");
  EXPECT_EQ(config.region, "eu-west-1");
  EXPECT_EQ(config.endpoint, "https://s3.eu-west-1.amazonaws.com");
}

TEST_F(S3ConfigTest, TheEnvironmentComesBeforeTheFiles) {
  write(home_ / ".aws/credentials",
        "[default]\naws_access_key_id = AKIDFILE\n"
        "aws_secret_access_key = file-secret\n");
  write(home_ / ".aws/config",
        "[default]\nregion = eu-west-1\nendpoint_url = http://file:1\n"
        "ca_bundle = /file/ca.pem\n");
  env_["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  env_["AWS_REGION"] = "region-a";
  env_["AWS_DEFAULT_REGION"] = "region-b";
  env_["AWS_ENDPOINT_URL"] = "http://generic:2";
  env_["AWS_CA_BUNDLE"] = "/env/ca.pem";
  S3Config config = load();
  EXPECT_EQ(config.access_key_id, "AKIDENV");
  EXPECT_EQ(config.credentials_from, "environment");
  EXPECT_EQ(config.region, "region-a");
  EXPECT_EQ(config.endpoint, "http://generic:2");
  EXPECT_EQ(config.ca_bundle, "/env/ca.pem");
  env_["AWS_ENDPOINT_URL_S3"] = "https://s3-only:3";
  env_.erase("AWS_REGION");
  config = load();
  EXPECT_EQ(config.endpoint, "https://s3-only:3");
  EXPECT_EQ(config.region, "region-b");
  // A variable set empty is unset, as for the AWS CLI.
  env_["AWS_ENDPOINT_URL_S3"] = "";
  env_["AWS_ENDPOINT_URL"] = "";
  env_["AWS_DEFAULT_REGION"] = "";
  config = load();
  EXPECT_EQ(config.endpoint, "http://file:1");
  EXPECT_EQ(config.region, "eu-west-1");
}

TEST_F(S3ConfigTest, FilesNamedByTheEnvironment) {
  const fs::path credentials = home_ / "site-credentials";
  const fs::path config_file = home_ / "site-config";
  write(credentials, "[ska]\naws_access_key_id = AKIDSITE\naws_secret_access_key = x\n");
  write(config_file, "[profile ska]\nregion = za-karoo-1\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = "~/site-credentials";  // ~ is expanded
  env_["AWS_CONFIG_FILE"] = config_file.string();
  env_["AWS_PROFILE"] = "ska";
  const S3Config config = load();
  EXPECT_EQ(config.access_key_id, "AKIDSITE");
  EXPECT_EQ(config.credentials_from, credentials.string() + " [ska]");
  EXPECT_EQ(config.region, "za-karoo-1");
}

TEST_F(S3ConfigTest, CredentialsInTheConfigFileAndAServicesEndpoint) {
  write(home_ / ".aws/config",
        "[profile minio]\naws_access_key_id = AKIDCONF\naws_secret_access_key = c\n"
        "endpoint_url = http://profile-wide:1\nservices = local\n\n"
        "[services local]\ns3 =\n  endpoint_url = http://minio:9000\n"
        "  addressing_style = path\n");
  env_["AWS_PROFILE"] = "minio";
  const S3Config config = load();
  EXPECT_EQ(config.access_key_id, "AKIDCONF");
  EXPECT_EQ(config.credentials_from, (home_ / ".aws/config").string() + " [profile minio]");
  EXPECT_EQ(config.endpoint, "http://minio:9000");  // the service's before the profile's
}

TEST_F(S3ConfigTest, NoCredentialsNamesTheVariableAndTheProfile) {
  const UsageError error = load_error();
  EXPECT_EQ(error.option(), "AWS_ACCESS_KEY_ID");
  const std::string text = error.what();
  EXPECT_NE(text.find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << text;
  EXPECT_NE(text.find("profile 'default'"), std::string::npos) << text;
  EXPECT_NE(text.find((home_ / ".aws/credentials").string()), std::string::npos) << text;
}

TEST_F(S3ConfigTest, HalfTheCredentialsNeverShowsTheSecret) {
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  UsageError error = load_error();
  EXPECT_EQ(error.option(), "AWS_ACCESS_KEY_ID");
  EXPECT_STREQ(error.what(), "not set, while AWS_SECRET_ACCESS_KEY is");
  env_.erase("AWS_SECRET_ACCESS_KEY");
  env_["AWS_ACCESS_KEY_ID"] = "AKIDEXAMPLE";
  EXPECT_EQ(load_error().option(), "AWS_SECRET_ACCESS_KEY");
  env_.erase("AWS_ACCESS_KEY_ID");
  write(home_ / ".aws/credentials", "[default]\naws_secret_access_key = " + std::string(kSecret));
  error = load_error();
  EXPECT_EQ(error.option(), (home_ / ".aws/credentials").string() + " [default]");
  EXPECT_STREQ(error.what(), "has aws_secret_access_key but no aws_access_key_id");
}

TEST_F(S3ConfigTest, AProfileNamedButNowhere) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIDEXAMPLE";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  env_["AWS_PROFILE"] = "nosuch";
  const UsageError error = load_error();
  EXPECT_EQ(error.option(), "AWS_PROFILE");
  EXPECT_NE(std::string(error.what()).find("profile 'nosuch' is in neither"), std::string::npos);
}

TEST_F(S3ConfigTest, MalformedValuesNameTheirSource) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIDEXAMPLE";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  env_["AWS_ENDPOINT_URL"] = "radosgw:7480";
  EXPECT_EQ(load_error().option(), "AWS_ENDPOINT_URL");
  env_["AWS_ENDPOINT_URL"] = "http://";
  EXPECT_EQ(load_error().option(), "AWS_ENDPOINT_URL");
  env_.erase("AWS_ENDPOINT_URL");
  env_["AWS_REGION"] = "us:east";  // a colon would break the signature's scope
  EXPECT_EQ(load_error().option(), "AWS_REGION");
  env_.erase("AWS_REGION");
  write(home_ / ".aws/config", "[default]\nregion = us east\n");
  EXPECT_EQ(load_error().option(), (home_ / ".aws/config").string() + " [default]");
}

TEST(S3Ini, ReadsSectionsSettingsAndNestedSettings) {
  std::istringstream text(
      "# comment\n; another\n\n[default]\nRegion = eu-west-1\nname: value: with colon\n"
      "  [profile  spaced ] \nkey=\n\n[services x]\ns3 =\n  endpoint_url = http://a:1\n"
      "\tmax_concurrent_requests = 4\nafter = 1\n");
  const IniSections sections = parse_aws_ini(text, "config");
  ASSERT_EQ(sections.size(), 3u);
  EXPECT_EQ(sections.at("default").at("region"), "eu-west-1");  // names lower case
  EXPECT_EQ(sections.at("default").at("name"), "value: with colon");
  EXPECT_EQ(sections.at("profile  spaced").at("key"), "");
  const auto& services = sections.at("services x");
  EXPECT_EQ(services.at("s3.endpoint_url"), "http://a:1");
  EXPECT_EQ(services.at("s3.max_concurrent_requests"), "4");
  EXPECT_EQ(services.at("after"), "1");
  EXPECT_EQ(services.count("endpoint_url"), 0u);
}

TEST(S3Ini, AMalformedLineIsNamedByItsNumberNotItsText) {
  std::istringstream text("[default]\naws_access_key_id = AKID\n" + std::string(kSecret) + "\n");
  try {
    parse_aws_ini(text, "/home/u/.aws/credentials");
    ADD_FAILURE() << "taken";
  } catch (const UsageError& error) {
    EXPECT_EQ(error.option(), "/home/u/.aws/credentials");
    EXPECT_STREQ(error.what(), "line 3: expected '[section]' or 'name = value'");
  }
  std::istringstream orphan("region = x\n");
  EXPECT_THROW(parse_aws_ini(orphan, "config"), UsageError);
  std::istringstream open_section("[default\n");
  EXPECT_THROW(parse_aws_ini(open_section, "config"), UsageError);
}

}  // namespace
}  // namespace iotest::storage::s3
