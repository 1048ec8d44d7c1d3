#include "iotest/storage/output/file_store.hpp"

#include <sys/statvfs.h>

#include <filesystem>

#include "iotest/storage/output/file_claim.hpp"

namespace iotest::storage {
namespace {

class FileStore final : public OutputStore {
 public:
  explicit FileStore(bool folder) : folder_(folder) {}

  // A path, not a URL (another store's: s3://...).
  bool holds(const std::string& path) const override {
    return path.find("://") == std::string::npos;
  }
  std::string names() const override { return "a path (not a URL)"; }
  std::unique_ptr<OutputClaim> claim(const std::string& path, std::uint32_t nonce,
                                     const std::string& option) const override {
    return std::make_unique<FileClaim>(path, nonce, option, folder_);
  }
  void check_creatable(const std::string& path, const std::string& option) const override {
    storage::check_creatable(path, option, folder_);
  }
  std::string partial_of(const std::string& path, std::uint32_t nonce) const override {
    return partial_path(path, nonce);
  }
  std::string place_of(const std::string& path) const override { return folder_of(path); }
  std::optional<double> free_bytes(const std::string& place) const override {
    struct statvfs fs {};
    if (::statvfs(place.c_str(), &fs) != 0) return std::nullopt;  // its claim has looked at it
    return static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
  }
  // A file, or a folder where outputs are folders (ms).
  bool exists(const std::string& path) const override {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec) || std::filesystem::is_directory(path, ec);
  }
  std::string identity(const std::string& path) const override {
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(path, ec);
    return ec ? path : canonical.string();
  }

 private:
  bool folder_;
};

}  // namespace

const OutputStore& file_store(bool folder) {
  static const FileStore files(false), folders(true);
  return folder ? folders : files;
}

}  // namespace iotest::storage
