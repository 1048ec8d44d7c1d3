// The XML S3 speaks: the bodies of the multipart calls, its listings and
// its error replies, read and written with libxml2. Elements are matched
// on their local names: S3's replies put them in the namespace
// http://s3.amazonaws.com/doc/2006-03-01/, some stores' (and proxies')
// in none.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace iotest::storage::s3 {

// A reply that is not the XML expected (not XML, or another document).
class XmlReplyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A part uploaded: what completing the upload lists.
struct CompletedPart {
  int part_number = 0;
  std::string etag;  // as S3 gave it, quotes included
  bool operator==(const CompletedPart&) const = default;
};

// <Error>: S3's account of a failed request.
struct ErrorReply {
  std::string code;     // "NoSuchBucket"
  std::string message;  // "The specified bucket does not exist"
  std::string request_id;
};

// An upload begun and neither completed nor aborted (it holds space).
struct PendingUpload {
  std::string key;
  std::string upload_id;
  std::string initiated;  // ISO 8601, as S3 wrote it
};
struct PendingUploadsPage {
  std::vector<PendingUpload> uploads;
  bool truncated = false;
  std::string next_key_marker;  // where the next page starts
  std::string next_upload_id_marker;
};

// A page of ListParts: the parts of an upload in progress.
struct PartsPage {
  std::vector<CompletedPart> parts;
  bool truncated = false;
  std::string next_part_number_marker;
};

struct ObjectEntry {
  std::string key;
  std::int64_t size = 0;
  std::string etag;
};
struct ObjectsPage {
  std::vector<ObjectEntry> objects;
  bool truncated = false;
  std::string next_continuation_token;  // ListObjectsV2's
};

// <InitiateMultipartUploadResult>: its UploadId.
std::string parse_initiate_multipart_upload(std::string_view xml);
// <CompleteMultipartUploadResult>: the object's ETag.
std::string parse_complete_multipart_upload_result(std::string_view xml);
// An <Error> document; nothing when `xml` is not one (an empty body, a
// proxy's HTML page, another document).
std::optional<ErrorReply> parse_error(std::string_view xml);
// <ListMultipartUploadsResult>.
PendingUploadsPage parse_list_multipart_uploads(std::string_view xml);
// <ListPartsResult>.
PartsPage parse_list_parts(std::string_view xml);
// <ListBucketResult> of ListObjectsV2 (list-type=2).
ObjectsPage parse_list_objects(std::string_view xml);

// The body of CompleteMultipartUpload: the parts, in the order given (S3
// wants them in ascending part numbers).
std::string complete_multipart_upload_body(const std::vector<CompletedPart>& parts);
// That body read back (what the store reads from it).
std::vector<CompletedPart> parse_complete_multipart_upload(std::string_view xml);

}  // namespace iotest::storage::s3
