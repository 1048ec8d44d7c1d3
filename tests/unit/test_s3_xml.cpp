// S3's XML (storage/s3/s3_xml.hpp), on replies shaped as AWS documents
// them (S3 API reference: CreateMultipartUpload, ListMultipartUploads,
// ListObjectsV2, CompleteMultipartUpload, Error responses), in S3's
// namespace, in none (some gateways), and with a prefix.
#include <gtest/gtest.h>

#include "iotest/storage/s3/s3_xml.hpp"

namespace iotest::storage::s3 {
namespace {

TEST(S3Xml, InitiateMultipartUploadGivesTheUploadId) {
  const std::string reply = R"(<?xml version="1.0" encoding="UTF-8"?>
<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
   <Bucket>ska-vis</Bucket>
   <Key>run-7/out0.ms</Key>
   <UploadId>2~qlbsfEyhoSv2Jrx7Mk0cTL6JAtUa9dN</UploadId>
</InitiateMultipartUploadResult>)";
  EXPECT_EQ(parse_initiate_multipart_upload(reply), "2~qlbsfEyhoSv2Jrx7Mk0cTL6JAtUa9dN");
  EXPECT_THROW(parse_initiate_multipart_upload("<InitiateMultipartUploadResult><Bucket>b</Bucket>"
                                               "</InitiateMultipartUploadResult>"),
               XmlReplyError);
}

TEST(S3Xml, AnErrorReplyAndWhatIsNotOne) {
  const auto error = parse_error(R"(<?xml version="1.0" encoding="UTF-8"?>
<Error>
  <Code>NoSuchKey</Code>
  <Message>The resource you requested does not exist</Message>
  <Resource>/ska-vis/run-7/out0.ms</Resource>
  <RequestId>4442587FB7D0A2F9</RequestId>
</Error>)");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "NoSuchKey");
  EXPECT_EQ(error->message, "The resource you requested does not exist");
  EXPECT_EQ(error->request_id, "4442587FB7D0A2F9");
  EXPECT_FALSE(parse_error(""));
  EXPECT_FALSE(parse_error("<html><body><h1>502 Bad Gateway</h1></body></html>"));
  EXPECT_FALSE(parse_error("<Error><Code>truncated"));  // not well-formed
  EXPECT_FALSE(parse_error("<ListBucketResult/>"));
}

TEST(S3Xml, ListMultipartUploads) {
  const std::string reply = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>ska-vis</Bucket>
  <KeyMarker></KeyMarker>
  <UploadIdMarker></UploadIdMarker>
  <NextKeyMarker>run-7/out1.ms</NextKeyMarker>
  <NextUploadIdMarker>2~b</NextUploadIdMarker>
  <MaxUploads>2</MaxUploads>
  <IsTruncated>true</IsTruncated>
  <Upload>
    <Key>run-7/out0.ms</Key>
    <UploadId>2~a</UploadId>
    <Initiator><ID>arn:aws:iam::111122223333:user/u</ID><DisplayName>u</DisplayName></Initiator>
    <StorageClass>STANDARD</StorageClass>
    <Initiated>2026-12-01T10:00:00.000Z</Initiated>
  </Upload>
  <Upload>
    <Key>run-7/out1.ms</Key>
    <UploadId>2~b</UploadId>
    <Initiated>2026-12-01T10:00:05.000Z</Initiated>
  </Upload>
</ListMultipartUploadsResult>)";
  const PendingUploadsPage page = parse_list_multipart_uploads(reply);
  ASSERT_EQ(page.uploads.size(), 2u);
  EXPECT_EQ(page.uploads[0].key, "run-7/out0.ms");
  EXPECT_EQ(page.uploads[0].upload_id, "2~a");
  EXPECT_EQ(page.uploads[0].initiated, "2026-12-01T10:00:00.000Z");
  EXPECT_EQ(page.uploads[1].upload_id, "2~b");
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next_key_marker, "run-7/out1.ms");
  EXPECT_EQ(page.next_upload_id_marker, "2~b");
  const auto empty = parse_list_multipart_uploads(
      "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>");
  EXPECT_TRUE(empty.uploads.empty());
  EXPECT_FALSE(empty.truncated);
}

TEST(S3Xml, ListParts) {
  const PartsPage page = parse_list_parts(R"(<?xml version="1.0" encoding="UTF-8"?>
<ListPartsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>ska-vis</Bucket>
  <Key>run-7/out0.ms</Key>
  <UploadId>2~a</UploadId>
  <PartNumberMarker>1</PartNumberMarker>
  <NextPartNumberMarker>3</NextPartNumberMarker>
  <MaxParts>2</MaxParts>
  <IsTruncated>true</IsTruncated>
  <Part>
    <PartNumber>2</PartNumber>
    <LastModified>2026-12-01T10:00:00.000Z</LastModified>
    <ETag>"7778aef83f66abc1fa1e8477f296d394"</ETag>
    <Size>5242880</Size>
  </Part>
  <Part>
    <PartNumber>3</PartNumber>
    <ETag>"aaaa18db4cc2f85cedef654fccc4a4x8"</ETag>
    <Size>10</Size>
  </Part>
</ListPartsResult>)");
  EXPECT_EQ(page.parts, (std::vector<CompletedPart>{{2, "\"7778aef83f66abc1fa1e8477f296d394\""},
                                                    {3, "\"aaaa18db4cc2f85cedef654fccc4a4x8\""}}));
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next_part_number_marker, "3");
}

TEST(S3Xml, ListObjectsV2) {
  const std::string reply = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>ska-vis</Name>
  <Prefix>run-7/</Prefix>
  <KeyCount>2</KeyCount>
  <MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents>
    <Key>run-7/out0.ms</Key>
    <LastModified>2026-12-01T10:00:00.000Z</LastModified>
    <ETag>&quot;599bab3ed2c697f1d26842727561fd94-3&quot;</ETag>
    <Size>12582912</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>run-7/out1.ms</Key>
    <ETag>"9b2cf535f27731c974343645a3985328"</ETag>
    <Size>0</Size>
  </Contents>
</ListBucketResult>)";
  const ObjectsPage page = parse_list_objects(reply);
  ASSERT_EQ(page.objects.size(), 2u);
  EXPECT_EQ(page.objects[0].key, "run-7/out0.ms");
  EXPECT_EQ(page.objects[0].size, 12582912);
  EXPECT_EQ(page.objects[0].etag, "\"599bab3ed2c697f1d26842727561fd94-3\"");
  EXPECT_EQ(page.objects[1].size, 0);
  EXPECT_EQ(page.objects[1].etag, "\"9b2cf535f27731c974343645a3985328\"");
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(S3Xml, LocalNamesWhateverTheNamespaceOrPrefix) {
  const std::string prefixed =
      R"(<s3:ListBucketResult xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/">
  <s3:IsTruncated>false</s3:IsTruncated>
  <s3:Contents><s3:Key>a</s3:Key><s3:Size>5</s3:Size><s3:ETag>"e"</s3:ETag></s3:Contents>
</s3:ListBucketResult>)";
  const ObjectsPage page = parse_list_objects(prefixed);
  ASSERT_EQ(page.objects.size(), 1u);
  EXPECT_EQ(page.objects[0].key, "a");
  EXPECT_EQ(page.objects[0].size, 5);
  EXPECT_FALSE(page.truncated);
  const ObjectsPage bare = parse_list_objects(
      "<ListBucketResult><Contents><Key>b</Key><Size>7</Size></Contents></ListBucketResult>");
  ASSERT_EQ(bare.objects.size(), 1u);
  EXPECT_EQ(bare.objects[0].size, 7);
}

TEST(S3Xml, TheWrongDocumentIsAnError) {
  EXPECT_THROW(parse_list_objects("<Error><Code>AccessDenied</Code></Error>"), XmlReplyError);
  EXPECT_THROW(parse_list_objects("not xml at all"), XmlReplyError);
  EXPECT_THROW(parse_list_objects(""), XmlReplyError);
  EXPECT_THROW(parse_list_objects("<ListBucketResult><Contents><Key>a</Key><Size>5x</Size>"
                                  "</Contents></ListBucketResult>"),
               XmlReplyError);
  try {
    parse_list_multipart_uploads("<ListBucketResult/>");
    ADD_FAILURE() << "taken";
  } catch (const XmlReplyError& error) {
    EXPECT_STREQ(error.what(),
                 "S3 reply: <ListBucketResult> where <ListMultipartUploadsResult> was expected");
  }
}

TEST(S3Xml, CompleteMultipartUploadBodyReadsBack) {
  const std::vector<CompletedPart> parts = {
      {1, "\"a54357aff0632cce46d942af68356b38\""},
      {2, "\"0c78aef83f66abc1fa1e8477f296d394\""},
      {3, "\"acbd18db4cc2f85cedef654fccc4a4d8&<odd>\""},  // escaped, and read back as it was
  };
  const std::string body = complete_multipart_upload_body(parts);
  EXPECT_NE(
      body.find("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find("<PartNumber>2</PartNumber>"), std::string::npos) << body;
  EXPECT_NE(body.find("&amp;&lt;odd&gt;"), std::string::npos) << body;
  EXPECT_EQ(parse_complete_multipart_upload(body), parts);
  EXPECT_TRUE(parse_complete_multipart_upload(complete_multipart_upload_body({})).empty());
}

TEST(S3Xml, CompleteMultipartUploadResultGivesTheEtag) {
  EXPECT_EQ(parse_complete_multipart_upload_result(R"(<?xml version="1.0" encoding="UTF-8"?>
<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Location>http://10.99.0.1:7480/ska-vis/run-7/out0.ms</Location>
  <Bucket>ska-vis</Bucket>
  <Key>run-7/out0.ms</Key>
  <ETag>"3858f62230ac3c915f300c664312c11f-3"</ETag>
</CompleteMultipartUploadResult>)"),
            "\"3858f62230ac3c915f300c664312c11f-3\"");
}

}  // namespace
}  // namespace iotest::storage::s3
