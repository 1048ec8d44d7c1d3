#include "iotest/storage/s3/s3_xml.hpp"

#include <fmt/format.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include <charconv>
#include <climits>
#include <memory>

namespace iotest::storage::s3 {

namespace {

constexpr const char* kS3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/";

const xmlChar* xml_text(const char* text) {
  return reinterpret_cast<const xmlChar*>(text);
}

// libxml2 sets itself up on first use, which two threads must not do at
// once (each S3Client of a MultipartUpload has its own thread).
void init_libxml_once() {
  static const bool ready = (xmlInitParser(), true);
  (void)ready;
}

struct FreeXmlDoc {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};
using XmlDoc = std::unique_ptr<xmlDoc, FreeXmlDoc>;

// The reply as a tree, or nothing when it is not well-formed XML. No
// network access and no messages on stderr: a reply is only data.
XmlDoc read_reply(std::string_view xml) {
  init_libxml_once();
  if (xml.empty() || xml.size() > INT_MAX) return nullptr;
  return XmlDoc(xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "s3-reply.xml", nullptr,
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
}

bool is_element(const xmlNode* node, const char* local_name) {
  // A node's name is its local name; its prefix is in its namespace.
  return node && node->type == XML_ELEMENT_NODE && xmlStrEqual(node->name, xml_text(local_name));
}

std::vector<const xmlNode*> child_elements(const xmlNode* parent, const char* local_name) {
  std::vector<const xmlNode*> found;
  for (const xmlNode* child = parent->children; child; child = child->next)
    if (is_element(child, local_name)) found.push_back(child);
  return found;
}

std::string node_text(const xmlNode* node) {
  xmlChar* content = xmlNodeGetContent(node);
  std::string text = content ? reinterpret_cast<const char*>(content) : "";
  xmlFree(content);
  return text;
}

// The text of the first child element named so; empty when there is none.
std::string child_text(const xmlNode* parent, const char* local_name) {
  const auto children = child_elements(parent, local_name);
  return children.empty() ? "" : node_text(children.front());
}

bool child_flag(const xmlNode* parent, const char* local_name) {
  return child_text(parent, local_name) == "true";
}

std::int64_t child_integer(const xmlNode* parent, const char* local_name) {
  const std::string text = child_text(parent, local_name);
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    throw XmlReplyError(fmt::format("S3 reply: <{}> '{}' is not an integer", local_name, text));
  return value;
}

// The root of the document `root_name` that `xml` should be.
const xmlNode* expect_root(const XmlDoc& doc, const char* root_name) {
  if (!doc) throw XmlReplyError(fmt::format("S3 reply: not XML (expected <{}>)", root_name));
  const xmlNode* root = xmlDocGetRootElement(doc.get());
  if (!is_element(root, root_name))
    throw XmlReplyError(fmt::format("S3 reply: <{}> where <{}> was expected",
                                    root ? reinterpret_cast<const char*>(root->name) : "",
                                    root_name));
  return root;
}

}  // namespace

std::string parse_initiate_multipart_upload(std::string_view xml) {
  const XmlDoc doc = read_reply(xml);
  const std::string upload_id =
      child_text(expect_root(doc, "InitiateMultipartUploadResult"), "UploadId");
  if (upload_id.empty())
    throw XmlReplyError("S3 reply: InitiateMultipartUploadResult has no UploadId");
  return upload_id;
}

std::string parse_complete_multipart_upload_result(std::string_view xml) {
  const XmlDoc doc = read_reply(xml);
  return child_text(expect_root(doc, "CompleteMultipartUploadResult"), "ETag");
}

std::optional<ErrorReply> parse_error(std::string_view xml) {
  const XmlDoc doc = read_reply(xml);
  const xmlNode* root = doc ? xmlDocGetRootElement(doc.get()) : nullptr;
  if (!is_element(root, "Error")) return std::nullopt;
  return ErrorReply{child_text(root, "Code"), child_text(root, "Message"),
                    child_text(root, "RequestId")};
}

PendingUploadsPage parse_list_multipart_uploads(std::string_view xml) {
  const XmlDoc doc = read_reply(xml);
  const xmlNode* root = expect_root(doc, "ListMultipartUploadsResult");
  PendingUploadsPage page;
  for (const xmlNode* upload : child_elements(root, "Upload"))
    page.uploads.push_back({child_text(upload, "Key"), child_text(upload, "UploadId"),
                            child_text(upload, "Initiated")});
  page.truncated = child_flag(root, "IsTruncated");
  page.next_key_marker = child_text(root, "NextKeyMarker");
  page.next_upload_id_marker = child_text(root, "NextUploadIdMarker");
  return page;
}

PartsPage parse_list_parts(std::string_view xml) {
  const XmlDoc doc = read_reply(xml);
  const xmlNode* root = expect_root(doc, "ListPartsResult");
  PartsPage page;
  for (const xmlNode* part : child_elements(root, "Part"))
    page.parts.push_back(
        {static_cast<int>(child_integer(part, "PartNumber")), child_text(part, "ETag")});
  page.truncated = child_flag(root, "IsTruncated");
  page.next_part_number_marker = child_text(root, "NextPartNumberMarker");
  return page;
}

ObjectsPage parse_list_objects(std::string_view xml) {
  const XmlDoc doc = read_reply(xml);
  const xmlNode* root = expect_root(doc, "ListBucketResult");
  ObjectsPage page;
  for (const xmlNode* object : child_elements(root, "Contents"))
    page.objects.push_back(
        {child_text(object, "Key"), child_integer(object, "Size"), child_text(object, "ETag")});
  page.truncated = child_flag(root, "IsTruncated");
  page.next_continuation_token = child_text(root, "NextContinuationToken");
  return page;
}

std::string complete_multipart_upload_body(const std::vector<CompletedPart>& parts) {
  init_libxml_once();
  const XmlDoc doc(xmlNewDoc(xml_text("1.0")));
  xmlNode* root = xmlNewNode(nullptr, xml_text("CompleteMultipartUpload"));
  xmlDocSetRootElement(doc.get(), root);
  xmlSetNs(root, xmlNewNs(root, xml_text(kS3Namespace), nullptr));
  for (const auto& part : parts) {
    // xmlNewTextChild escapes the text (an ETag is quoted).
    xmlNode* element = xmlNewChild(root, root->ns, xml_text("Part"), nullptr);
    xmlNewTextChild(element, root->ns, xml_text("PartNumber"),
                    xml_text(std::to_string(part.part_number).c_str()));
    xmlNewTextChild(element, root->ns, xml_text("ETag"), xml_text(part.etag.c_str()));
  }
  xmlChar* text = nullptr;
  int bytes = 0;
  xmlDocDumpMemoryEnc(doc.get(), &text, &bytes, "UTF-8");
  if (!text) throw std::bad_alloc();
  std::string body(reinterpret_cast<const char*>(text), static_cast<std::size_t>(bytes));
  xmlFree(text);
  return body;
}

std::vector<CompletedPart> parse_complete_multipart_upload(std::string_view xml) {
  const XmlDoc doc = read_reply(xml);
  std::vector<CompletedPart> parts;
  for (const xmlNode* part : child_elements(expect_root(doc, "CompleteMultipartUpload"), "Part"))
    parts.push_back(
        {static_cast<int>(child_integer(part, "PartNumber")), child_text(part, "ETag")});
  return parts;
}

}  // namespace iotest::storage::s3
