#include "iotest/storage/s3/object_ranges.hpp"

#include <array>
#include <mutex>

#include "iotest/common/errors.hpp"
#include "iotest/storage/posix/posix_format.hpp"
#include "iotest/storage/s3/s3_client.hpp"
#include "iotest/storage/s3/s3_config.hpp"

namespace iotest::storage::s3 {
namespace {

// An object's bytes, a ranged GET at a time. The reader's calls may come
// from several threads: one client (one connection) serves them in turn.
class ObjectRanges final : public posix_format::ByteRanges {
 public:
  ObjectRanges(ObjectUrl object, S3Config config)
      : object_(std::move(object)), client_(std::move(config)) {
    const auto head = client_.head_object(object_);
    if (!head) throw UsageError(to_string(object_), "cannot open: no such object");
    size_ = head->size;
  }
  std::int64_t size() const override { return size_; }
  bool read(void* out, std::int64_t bytes, std::int64_t offset) const override {
    if (offset < 0 || bytes < 0 || offset + bytes > size_) return false;
    if (bytes == 0) return true;
    const std::lock_guard<std::mutex> hold(lock_);
    client_.get_range(object_, static_cast<std::uint64_t>(offset), static_cast<std::size_t>(bytes),
                      out);
    return true;
  }

 private:
  ObjectUrl object_;
  mutable std::mutex lock_;
  mutable S3Client client_;
  std::int64_t size_ = 0;
};

}  // namespace

bool is_posix_format_object(const std::string& path) {
  if (!is_s3_url(path)) return false;
  // Its first bytes alone (its store's exists() has asked for it already):
  // an object shorter than the magic, or not there, is not one.
  std::array<char, 16> first{};
  try {
    S3Client(load_s3_config()).get_range(parse_s3_url(path, path), 0, first.size(), first.data());
  } catch (const S3Error&) {
    return false;
  }
  return posix_format::has_posix_magic(first.data(), first.size());
}

std::unique_ptr<Reader> open_object_reader(const std::string& path) {
  auto object = parse_s3_url(path, path);
  auto ranges = std::make_unique<ObjectRanges>(object, load_s3_config());
  return std::make_unique<posix_format::PosixFormatReader>(std::move(ranges), path, "s3");
}

}  // namespace iotest::storage::s3
