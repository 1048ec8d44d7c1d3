#include "iotest/storage/msv4/processing_set_store.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <stdexcept>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/msv4/msv4_layout.hpp"
#include "iotest/storage/msv4/msv4_nodes.hpp"
#include "iotest/storage/output/file_claim.hpp"
#include "iotest/storage/output/file_store.hpp"
#include "iotest/storage/output/unpublished.hpp"
#include "iotest/storage/s3/object_url.hpp"
#include "iotest/storage/s3/s3_client.hpp"
#include "iotest/storage/s3/s3_config.hpp"
#include "iotest/storage/s3/s3_store.hpp"

namespace iotest::storage::msv4 {
namespace {

std::string root_key_of(const std::string& set) {
  return set + "/" + kRootKey;
}

Bytes text_bytes(const std::string& text) {
  const auto* b = reinterpret_cast<const std::byte*>(text.data());
  return {b, b + text.size()};
}

// The root written into the folder `set` (its final or kept name), synced.
void write_root_in_folder(const std::string& set) {
  const auto store = folder_store(set, 1);
  const auto root = root_of(*store, set_stem(set));
  store->put(kRootKey, text_bytes(root.dump(2)));
  store->flush();
}

// A set on a file system: the folder output's claim, and the root once
// the set has its name.
class FolderSetClaim final : public OutputClaim {
 public:
  FolderSetClaim(const std::string& path, std::uint32_t nonce, const std::string& option)
      : inner_(path, nonce, option, /*folder=*/true) {}
  void go_ahead() const override { inner_.go_ahead(); }
  const std::string& path() const override { return inner_.path(); }
  const std::string& partial() const override { return inner_.partial(); }
  bool replaces() const override { return inner_.replaces(); }
  std::string kept_name() const override { return inner_.kept_name(); }
  std::string set_layout(const FileLayout& request) const override {
    return inner_.set_layout(request);
  }
  std::string take() override { return inner_.take(); }
  void commit() override {
    write_root_in_folder(inner_.path());
    inner_.commit();
  }
  std::string keep() override {
    auto kept = inner_.keep();
    write_root_in_folder(kept);
    return kept;
  }

 private:
  FileClaim inner_;
};

// Every object under the set's prefix removed, unless a root is there (a
// published set, never touched): what a failed run left.
void clear_unpublished(const std::string& set) {
  const auto store = bucket_store(set, kDefaultInFlight);
  if (store->get(kRootKey)) return;
  store->remove_all("");
}

// A set on an S3 store: the root's upload is the claim.
class BucketSetClaim final : public OutputClaim {
 public:
  BucketSetClaim(const std::string& path, std::uint32_t nonce, const std::string& option)
      : path_(path), root_(s3::s3_store().claim(root_key_of(path), nonce, option)) {
    if (root_->replaces())
      throw UsageError(option, fmt::format("{} holds a processing set already, and an object store "
                                           "cannot replace a set whole: remove it first (rclone "
                                           "purge) or choose another name",
                                           path_));
    clear_unpublished(path_);  // the older upload goes ahead: no live run writes here
  }
  ~BucketSetClaim() override {
    if (!published_) clear_unpublished_quietly();
  }
  void go_ahead() const override { root_->go_ahead(); }
  const std::string& path() const override { return path_; }
  const std::string& partial() const override { return path_; }  // objects under the set's prefix
  bool replaces() const override { return false; }
  std::string kept_name() const override { return {}; }
  std::string set_layout(const FileLayout&) const override {
    return "an object store has no file layout";
  }
  // The root, made of the writers' MSv4s, as the upload's one part; then
  // the name checked as the s3 back-end's claim checks it.
  std::string take() override {
    const auto store = bucket_store(path_, 1);
    const std::string root = root_of(*store, set_stem(path_)).dump(2);
    const auto target = s3::parse_upload_name(root_->partial());
    s3::S3Client client(s3::load_s3_config());
    client.upload_part(target.object, target.upload_id, 1, root.data(), root.size());
    return root_->take();
  }
  void commit() override {
    root_->commit();
    published_ = true;
  }
  std::string keep() override {
    root_->keep();
    clear_unpublished_quietly();
    return {};
  }

 private:
  void clear_unpublished_quietly() noexcept {
    try {
      clear_unpublished(path_);
    } catch (const std::exception&) {  // left for the next run's claim to clear
    }
  }
  std::string path_;
  std::unique_ptr<OutputClaim> root_;
  bool published_ = false;
};

class ProcessingSetStore final : public OutputStore {
 public:
  bool holds(const std::string& path) const override {
    return folders().holds(path) || s3::s3_store().holds(path);
  }
  std::string names() const override { return "a path or an s3://BUCKET/KEY URL"; }
  std::unique_ptr<OutputClaim> claim(const std::string& path, std::uint32_t nonce,
                                     const std::string& option) const override {
    if (s3::is_s3_url(path)) return std::make_unique<BucketSetClaim>(path, nonce, option);
    return std::make_unique<FolderSetClaim>(path, nonce, option);
  }
  void check_creatable(const std::string& path, const std::string& option) const override {
    of(path).check_creatable(path, option);
  }
  void check_name(const std::string& path, const std::string& option) const override {
    of(path).check_name(path, option);
  }
  // On S3 every writer writes under the set's own prefix.
  std::string partial_of(const std::string& path, std::uint32_t nonce) const override {
    return s3::is_s3_url(path) ? path : folders().partial_of(path, nonce);
  }
  std::string place_of(const std::string& path) const override { return of(path).place_of(path); }
  std::optional<double> free_bytes(const std::string& place) const override {
    return of(place).free_bytes(place);
  }
  bool exists(const std::string& path) const override {
    if (!s3::is_s3_url(path)) return folders().exists(path);
    return zarr_store_at(path, 1)->get(kRootKey).has_value();
  }
  std::string identity(const std::string& path) const override { return of(path).identity(path); }
  bool keeps_unpublished() const override { return true; }
  // On S3: the root's uploads aborted and the objects of a set never
  // published removed. Files need nothing: the .partial folder says it.
  void drop_unpublished(const std::vector<std::string>& paths) const override {
    for (const auto& path : paths) {
      if (!s3::is_s3_url(path)) continue;
      s3::s3_store().drop_unpublished({root_key_of(path)});
      clear_unpublished(path);
    }
  }

 private:
  static const OutputStore& folders() { return file_store(/*folder=*/true); }
  static const OutputStore& of(const std::string& path) {
    return s3::is_s3_url(path) ? s3::s3_store() : folders();
  }
};

}  // namespace

const OutputStore& processing_set_store() {
  static const ProcessingSetStore store;
  return store;
}

nlohmann::json root_of(ZarrStore& store, const std::string& stem) {
  std::vector<std::pair<std::string, nlohmann::json>> msv4s;
  index_t files = 1;
  for (index_t i = 0; i < files; ++i) {
    const std::string name = msv4_name(stem, i);
    const auto bytes = store.get(name + "/zarr.json");
    if (!bytes)
      throw std::runtime_error(fmt::format(
          "{}: MSv4 {} has no metadata (its writer did not finish)", store.root(), name));
    auto doc = nlohmann::json::parse(reinterpret_cast<const char*>(bytes->data()),
                                     reinterpret_cast<const char*>(bytes->data()) + bytes->size());
    files = doc.at("attributes").at(kLayoutAttribute).at("files").get<index_t>();
    msv4s.emplace_back(name, std::move(doc));
  }
  return processing_set_root(msv4s);
}

}  // namespace iotest::storage::msv4
