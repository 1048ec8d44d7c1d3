// The s3 back-end (`--storage=s3`, outputs s3://BUCKET/PREFIX/vis%d): each
// writer's visibilities go into one object, in the posix back-end's format
// (posix/posix_format.hpp), so the same reader reads both. The object is
// sent as a multipart upload while the chunks come: the header and the
// slots fill a part buffer, each full part goes to MultipartUpload, which
// keeps --s3.parts-in-flight of them in flight; the index, JSON and footer
// end the last part at close. The upload is the one the output's claim
// began (s3_store.hpp), and the claim completes it when the run publishes.
//
// A chunk is never read back: its slot may be in a part sent already. A
// chunk written again (a part of it that came late) takes a slot of its
// own instead, and the JSON says so (parts_in_slots): a reader merges a
// chunk's slots, whose values never overlap.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/posix/posix_format.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/s3/multipart_upload.hpp"
#include "iotest/storage/s3/object_ranges.hpp"
#include "iotest/storage/s3/s3_client.hpp"
#include "iotest/storage/s3/s3_config.hpp"
#include "iotest/storage/s3/s3_store.hpp"

namespace iotest::storage {
namespace {

namespace format = posix_format;

struct S3Options {
  std::size_t part_bytes = 0;
  int parts_in_flight = 0;
};

class S3Backend final : public Backend {
 public:
  explicit S3Backend(S3Options options) : options_(options) {}
  ~S3Backend() override { abort(); }

  // The upload is the claim's: it aborts it; here only the parts stop.
  void abort() noexcept override {
    if (upload_) upload_->abort();
    upload_.reset();
  }
  std::string_view name() const override { return "s3"; }
  std::string durability() const override {
    return "multipart upload, each part acknowledged by the store; completed at publication";
  }
  // The part being filled and those in flight: the memory model's.
  index_t held_bytes() const override {
    return (static_cast<index_t>(options_.parts_in_flight) + 1) *
           static_cast<index_t>(options_.part_bytes);
  }

 protected:
  void do_open(const std::string& partial) override {
    const auto target = s3::parse_upload_name(partial);
    // Its workers' requests are watched through this writer's own calls:
    // add_part waits (writing) while the parts in flight do not move, and
    // finish (closing) until the last is sent. (Not rank_progress(): a
    // forked writer must not touch its parent's table.)
    upload_ = std::make_unique<s3::MultipartUpload>(s3::load_s3_config(), target.object,
                                                    target.upload_id, options_.parts_in_flight);
    index_.clear();
    chunk_bytes_ = layout().chunk_bytes();
    slot_bytes_ = format::slot_bytes_for(chunk_bytes_);
    part_.reserve(options_.part_bytes);
    const auto header = format::header(chunk_bytes_, slot_bytes_);
    append(header.data(), header.size());
  }

  void do_write_chunk(const ChunkKey& key, const cplx* data, bool accumulate,
                      const PresenceWord*) override {
    index_.push_back(key.row_chunk * layout().freq_chunks() + key.freq_chunk);
    append(data, static_cast<std::size_t>(chunk_bytes_));
    pad(static_cast<std::size_t>(slot_bytes_ - chunk_bytes_));
    parts_in_slots_ = parts_in_slots_ || accumulate;
    record_checksum(key, data, /*part=*/accumulate);  // a late part: an entry of its own
  }

  void do_flush() override {}  // nothing to sync: a part is durable once acknowledged

  void do_close() override {
    const auto trailer = format::trailer(layout(), index_, chunk_bytes_, slot_bytes_,
                                         written_parts(), checksums(), parts_in_slots_);
    append(trailer.data(), trailer.size());
    send_part();  // the last, of any size
    upload_->finish();
    upload_.reset();
  }

 private:
  void append(const void* bytes, std::size_t n) {
    const auto* from = static_cast<const std::byte*>(bytes);
    while (n > 0) {
      const std::size_t take = std::min(n, options_.part_bytes - part_.size());
      part_.insert(part_.end(), from, from + take);
      from += take, n -= take;
      if (part_.size() == options_.part_bytes) send_part();
    }
  }
  void pad(std::size_t n) {
    static const std::vector<std::byte> zeros(format::kBlock);
    while (n > 0) {
      const std::size_t take = std::min(n, zeros.size());
      append(zeros.data(), take);
      n -= take;
    }
  }
  void send_part() {
    if (part_.empty()) return;
    upload_->add_part(std::move(part_));
    part_ = {};
    part_.reserve(options_.part_bytes);
  }

  const S3Options options_;
  std::unique_ptr<s3::MultipartUpload> upload_;
  std::vector<std::byte> part_;      // the part being filled
  std::vector<std::int64_t> index_;  // slot -> chunk id, 8 B per slot written
  std::int64_t chunk_bytes_ = 0, slot_bytes_ = 0;
  bool parts_in_slots_ = false;
};

S3Options s3_options(const StorageOptions& options) {
  S3Options o;
  const auto number = [&](const std::string& key, long fallback, long least, const char* what) {
    const auto it = options.values.find(key);
    if (it == options.values.end()) return fallback;
    try {
      std::size_t used = 0;
      const long v = std::stol(it->second, &used);
      if (used == it->second.size() && v >= least) return v;
    } catch (const std::exception&) {
    }
    throw UsageError("--" + key,
                     fmt::format("expected {} >= {}, got '{}'", what, least, it->second));
  };
  o.part_bytes = static_cast<std::size_t>(number("s3.part-size", 8, 5, "a part size in MiB")) << 20;
  o.parts_in_flight = static_cast<int>(number("s3.parts-in-flight", 8, 1, "a count of parts"));
  return o;
}

// What the report says of the store: its answer to one request names its
// software (a store that does not answer was refused at the claim).
StoreDescription describe_store(const StorageOptions& options, const std::string& path) {
  const auto o = s3_options(options);
  const auto config = s3::load_s3_config();
  StoreDescription d;
  d.kind = "S3 object store";
  d.endpoint = config.endpoint;
  d.region = config.region;
  d.credentials_from = config.credentials_from;
  d.bucket = s3::parse_s3_url(path, "OUTPUT").bucket;
  d.part_bytes = static_cast<std::int64_t>(o.part_bytes);
  d.requests_in_flight = o.parts_in_flight;
  try {
    s3::S3Client client(config);
    client.head_bucket(d.bucket);
    d.server = client.server();
  } catch (const s3::S3Error&) {  // its name unknown: the report says so
  }
  return d;
}

}  // namespace

BackendSpec s3_spec() {
  BackendSpec s;
  s.name = "s3";
  s.store = &s3::s3_store();
  s.names = "s3://";
  s.named_by = [](const std::string& path) { return s3::is_s3_url(path); };
  s.summary =
      "one object per writer on an S3 store (s3://BUCKET/KEY), sent as a multipart upload, in "
      "the posix back-end's format; credentials and endpoint as the AWS tools take them";
  s.options = {
      {"s3.part-size", "MiB a part (S3's least: 5)", false, "8"},
      {"s3.parts-in-flight", "parts sent at once, each on its own connection", false, "8"},
  };
  s.make = [](const StorageOptions& options) -> std::unique_ptr<Backend> {
    return std::make_unique<S3Backend>(s3_options(options));
  };
  s.recognises = &s3::is_posix_format_object;
  s.open = [](const std::string& path, const StorageOptions&) -> std::unique_ptr<Reader> {
    return s3::open_object_reader(path);
  };
  s.describe = &describe_store;
  return s;
}

}  // namespace iotest::storage
