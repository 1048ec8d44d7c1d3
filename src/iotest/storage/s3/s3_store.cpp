#include "iotest/storage/s3/s3_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "iotest/common/errors.hpp"
#include "iotest/storage/output/unpublished.hpp"
#include "iotest/storage/s3/s3_client.hpp"
#include "iotest/storage/s3/s3_config.hpp"

namespace iotest::storage::s3 {
namespace {

constexpr std::string_view kUploadQuery = "?uploadId=";

// The store answers or the option is wrong: a wrong key, a bucket that is
// not there, an endpoint that does not answer are the user's to fix,
// before any work (one line, exit 2).
template <typename Call>
auto ask(const std::string& option, Call call) {
  try {
    return call();
  } catch (const S3Error& e) {
    throw UsageError(option, e.what());
  }
}

// The key's uploads begun and not finished, oldest first (S3 gives when
// each began; of two begun together, the smaller id).
std::vector<PendingUpload> uploads_of(S3Client& client, const ObjectUrl& object) {
  auto uploads = client.list_multipart_uploads(object.bucket, object.key);
  std::erase_if(uploads, [&](const PendingUpload& u) { return u.key != object.key; });
  std::sort(uploads.begin(), uploads.end(), [](const auto& a, const auto& b) {
    return std::tie(a.initiated, a.upload_id) < std::tie(b.initiated, b.upload_id);
  });
  return uploads;
}

// A clean-up's requests, as the job ends: few attempts, short waits.
RetryPolicy quick_policy() {
  RetryPolicy p;
  p.attempts = 2;
  p.first_backoff = std::chrono::milliseconds(100);
  p.connect_timeout = std::chrono::seconds(3);
  p.stall_timeout = std::chrono::seconds(5);
  return p;
}

// Every upload of these objects begun and not finished, aborted: a run's
// own (a later run of the same names would have been refused while it
// wrote), or a dead run's.
void abort_uploads_of(const S3Config& config, const std::vector<ObjectUrl>& objects) {
  S3Client client(config, quick_policy());
  for (const auto& object : objects)
    for (const auto& upload : uploads_of(client, object))
      client.abort_multipart_upload(object, upload.upload_id);
}

class S3Claim final : public OutputClaim {
 public:
  S3Claim(const std::string& path, std::uint32_t nonce, const std::string& option)
      : path_(path),
        object_(parse_s3_url(path, option)),
        config_(ask(option, [] { return load_s3_config(); })),
        client_(config_) {
    ask(option, [&] { client_.head_bucket(object_.bucket); });
    before_ = ask(option, [&] { return client_.head_object(object_); });
    upload_id_ = ask(option, [&] {
      return client_.create_multipart_upload(object_, {{"iotest-nonce", std::to_string(nonce)}});
    });
    partial_ = upload_name({object_, upload_id_});
    // Taken back if the process ends without unwinding (SIGTERM, MPI_Abort).
    unpublished_.emplace([config = config_, object = object_, id = upload_id_] {
      S3Client(config, quick_policy()).abort_multipart_upload(object, id);
    });
    try {
      give_way_to_an_older_upload(option);
    } catch (...) {
      abort_upload();
      throw;
    }
  }
  ~S3Claim() override {
    if (!published_) abort_upload();
  }

  void go_ahead() const override {}  // the oldest upload goes ahead: nothing to say
  const std::string& path() const override { return path_; }
  const std::string& partial() const override { return partial_; }
  bool replaces() const override { return before_.has_value(); }
  std::string kept_name() const override { return {}; }  // an upload cannot be renamed
  std::string set_layout(const FileLayout&) const override {
    return "an object store has no file layout";
  }

  // Whether the name is still the object that was there at the claim (or
  // none): another run's object under it is a clash, left alone.
  std::string take() override {
    const auto now = client_.head_object(object_);
    const bool same =
        now.has_value() == before_.has_value() && (!now || now->etag == before_->etag);
    if (same) return {};
    return fmt::format("another run's object took the name {} while this run wrote it (ETag {})",
                       path_, now ? now->etag : "none");
  }
  // Completing the upload publishes the object, whole.
  void commit() override {
    const auto parts = client_.list_parts(object_, upload_id_);
    client_.complete_multipart_upload(object_, upload_id_, parts);
    published_ = true;
    unpublished_->release();
  }
  std::string keep() override {
    abort_upload();
    return {};
  }

 private:
  // Of the key's uploads, the oldest goes ahead; this one, unless it is
  // the oldest, gives way (a run started while another writes is refused).
  void give_way_to_an_older_upload(const std::string& option) {
    const auto uploads = ask(option, [&] { return uploads_of(client_, object_); });
    if (uploads.empty() || uploads.front().upload_id == upload_id_) return;
    throw UsageError(option,
                     fmt::format("another run is writing {} (its upload {}, begun {}); if "
                                 "that run has died, abort its upload (rclone backend "
                                 "cleanup, or the store's own tools)",
                                 path_, uploads.front().upload_id, uploads.front().initiated));
  }
  void abort_upload() noexcept {
    if (unpublished_) unpublished_->release();  // aborted here, once
    if (upload_id_.empty()) return;
    try {
      // A clean-up, perhaps as the run fails: bounded, as the job's end is.
      S3Client(config_, quick_policy()).abort_multipart_upload(object_, upload_id_);
    } catch (const std::exception&) {  // left to the store's lifecycle rule; never visible
    }
    upload_id_.clear();
  }

  std::string path_, partial_;
  ObjectUrl object_;
  S3Config config_;
  S3Client client_;
  std::optional<ObjectHead> before_;  // under the name when claimed
  std::string upload_id_;             // empty once completed or aborted
  bool published_ = false;
  std::optional<UnpublishedOutput> unpublished_;
};

class S3Store final : public OutputStore {
 public:
  bool holds(const std::string& path) const override { return is_s3_url(path); }
  std::string names() const override { return "an s3://BUCKET/KEY URL"; }
  std::unique_ptr<OutputClaim> claim(const std::string& path, std::uint32_t nonce,
                                     const std::string& option) const override {
    return std::make_unique<S3Claim>(path, nonce, option);
  }
  void check_creatable(const std::string& path, const std::string& option) const override {
    const auto object = parse_s3_url(path, option);
    S3Client client(ask(option, [] { return load_s3_config(); }));
    ask(option, [&] { client.head_bucket(object.bucket); });
  }
  void check_name(const std::string& path, const std::string& option) const override {
    parse_s3_url(path, option);
  }
  std::string partial_of(const std::string&, std::uint32_t) const override {
    throw std::logic_error("an S3 output is never shared: its writer has its claim's upload");
  }
  std::string place_of(const std::string& path) const override {
    return to_string({parse_s3_url(path, path).bucket, ""});
  }
  // S3 has no call that says how much room is left (a bucket's quota is
  // the store's admin's business): the run finds it when it is reached.
  std::optional<double> free_bytes(const std::string&) const override { return std::nullopt; }
  bool exists(const std::string& path) const override {
    S3Client client(load_s3_config());
    return client.head_object(parse_s3_url(path, path)).has_value();
  }
  std::string identity(const std::string& path) const override {
    return to_string(parse_s3_url(path, path));
  }
  bool keeps_unpublished() const override { return true; }
  void drop_unpublished(const std::vector<std::string>& paths) const override {
    std::vector<ObjectUrl> objects;
    for (const auto& path : paths) objects.push_back(parse_s3_url(path, path));
    abort_uploads_of(load_s3_config(), objects);
  }
};

}  // namespace

const OutputStore& s3_store() {
  static const S3Store store;
  return store;
}

std::string upload_name(const UploadTarget& target) {
  return to_string(target.object) + std::string(kUploadQuery) + target.upload_id;
}

UploadTarget parse_upload_name(const std::string& partial) {
  const auto at = partial.rfind(kUploadQuery);
  if (at == std::string::npos) throw std::logic_error("not an S3 upload: " + partial);
  return {parse_s3_url(partial.substr(0, at), partial), partial.substr(at + kUploadQuery.size())};
}

}  // namespace iotest::storage::s3
