// S3 object URLs (storage/s3/object_url.hpp): s3://BUCKET/KEY as users
// write it, the bucket name rules S3 enforces, and the URI encoding the
// signature covers (libcurl 7.88 signs the path and query as written).
#include <gtest/gtest.h>

#include "iotest/common/errors.hpp"
#include "iotest/storage/s3/object_url.hpp"

namespace iotest::storage::s3 {
namespace {

TEST(S3Url, ParsesBucketAndKey) {
  const ObjectUrl object = parse_s3_url("s3://ska-vis/run-7/out0.ms", "--output");
  EXPECT_EQ(object.bucket, "ska-vis");
  EXPECT_EQ(object.key, "run-7/out0.ms");
  EXPECT_EQ(to_string(object), "s3://ska-vis/run-7/out0.ms");
}

TEST(S3Url, ABucketAloneHasAnEmptyKey) {
  EXPECT_EQ(parse_s3_url("s3://ska-vis", "--output"), (ObjectUrl{"ska-vis", ""}));
  EXPECT_EQ(parse_s3_url("s3://ska-vis/", "--output"), (ObjectUrl{"ska-vis", ""}));
  EXPECT_EQ(to_string(ObjectUrl{"ska-vis", ""}), "s3://ska-vis");
  // A "folder" key keeps its slash.
  EXPECT_EQ(parse_s3_url("s3://ska-vis/run-7/", "--output").key, "run-7/");
}

TEST(S3Url, KnowsAnS3UrlFromAPath) {
  EXPECT_TRUE(is_s3_url("s3://b/k"));
  EXPECT_TRUE(is_s3_url("s3://"));  // meant for S3, if malformed
  EXPECT_FALSE(is_s3_url("/shared/out.h5"));
  EXPECT_FALSE(is_s3_url("S3://b/k"));
  EXPECT_FALSE(is_s3_url("https://s3.amazonaws.com/b/k"));
}

TEST(S3Url, RefusesMalformedUrlsNamingTheOption) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"https://host/b/k", "not an s3:// URL"},
      {"s3://", "no bucket"},
      {"s3:///key", "no bucket"},
      {"s3://ab/k", "3 to 63 characters"},
      {"s3://" + std::string(64, 'a') + "/k", "3 to 63 characters"},
      {"s3://Ska-Vis/k", "lower-case letters"},
      {"s3://ska_vis/k", "lower-case letters"},
      {"s3://-skavis/k", "begins and ends"},
      {"s3://skavis-/k", "begins and ends"},
      {"s3://ska..vis/k", "two dots"},
      {"s3://192.168.1.10/k", "IP address"},
      {"s3://xn--skavis/k", "xn--"},
      {"s3://skavis/" + std::string(1025, 'k'), "at most 1024 bytes"},
  };
  for (const auto& [url, why] : bad) {
    try {
      parse_s3_url(url, "--output");
      ADD_FAILURE() << url << " was taken";
    } catch (const UsageError& error) {
      EXPECT_EQ(error.option(), "--output") << url;
      EXPECT_NE(std::string(error.what()).find(why), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("expected s3://BUCKET/KEY"), std::string::npos);
    }
  }
}

TEST(S3Url, TakesTheBucketNamesS3Takes) {
  for (const char* bucket : {"abc", "ska-vis.2026", "0day", "a-b-c"})
    EXPECT_EQ(bucket_name_problem(bucket), "") << bucket;
  EXPECT_EQ(bucket_name_problem(std::string(63, 'z')), "");
}

TEST(S3Url, EncodesAsSigV4Does) {
  EXPECT_EQ(uri_encode("run 7/a+b=c~d_e.f-g", true), "run%207/a%2Bb%3Dc~d_e.f-g");
  EXPECT_EQ(uri_encode("run 7/a", false), "run%207%2Fa");
  EXPECT_EQ(uri_encode("\xc3\xa9", true), "%C3%A9");  // UTF-8 é, upper-case hex
  EXPECT_EQ(uri_encode("a..b/../c", true), "a..b/../c");
}

TEST(S3Url, QueriesAreCanonical) {
  // radosgw needs "uploads=", not "uploads".
  EXPECT_EQ(canonical_query({{"uploads", ""}}), "uploads=");
  EXPECT_EQ(canonical_query({{"uploadId", "2~Ab/c+d"}, {"partNumber", "3"}}),
            "partNumber=3&uploadId=2~Ab%2Fc%2Bd");
  EXPECT_EQ(
      canonical_query({{"prefix", "run 7/"}, {"list-type", "2"}, {"continuation-token", "1/+x=="}}),
      "continuation-token=1%2F%2Bx%3D%3D&list-type=2&prefix=run%207%2F");
  EXPECT_EQ(canonical_query({{"uploads", ""}, {"upload-id-marker", "u"}, {"key-marker", "k"}}),
            "key-marker=k&upload-id-marker=u&uploads=");
  EXPECT_EQ(canonical_query({}), "");
}

}  // namespace
}  // namespace iotest::storage::s3
