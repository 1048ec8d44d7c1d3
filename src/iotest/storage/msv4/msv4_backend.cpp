// The msv4 back-end: an MSv4 processing set (xradio's, zarr format 3) for
// the whole run, on a folder or an S3 store, each writer one MSv4 of its
// own frequency range (msv4_layout.hpp says the layout; docs/storage.md,
// "MSv4 processing sets", why). No C or C++ library writes zarr, so the
// writer puts its keys itself through a ZarrStore: each VISIBILITY chunk
// is one file or object, written once, as it comes. The set is published
// by its claim (processing_set_store.hpp), which writes the root's
// metadata last.
#include <fmt/format.h>

#include <algorithm>
#include <complex>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/msv4/msv4_layout.hpp"
#include "iotest/storage/msv4/msv4_nodes.hpp"
#include "iotest/storage/msv4/msv4_reader.hpp"
#include "iotest/storage/msv4/processing_set_store.hpp"
#include "iotest/storage/msv4/zarr_store.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/s3/object_url.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::storage {
namespace {

using Cell = std::complex<float>;

// Page-aligned storage for a std::vector: what O_DIRECT writes from.
template <class T>
struct PageAligned {
  using value_type = T;
  static constexpr std::align_val_t kPage{4096};
  PageAligned() = default;
  template <class U>
  explicit PageAligned(const PageAligned<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kPage)); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, kPage); }
  friend bool operator==(const PageAligned&, const PageAligned&) { return true; }
};

struct Msv4Options {
  int in_flight = 0;  // 0: in_flight_for's
  // Each VISIBILITY chunk's file made at open (ZarrStore::reserve), as
  // HDF5 allocates chunks at create: the stream time is the writes', and
  // the files' making is in the open time the report gives apart.
  bool files_ahead = true;
};

// Writes kept going at once, unless given: on a folder, enough for about
// kFolderBytesInFlight of chunks being written back (a local file system)
// or fsynced (any other), each waited for by a thread of its own (one
// writer at 8 chunks of 512 KiB in flight reached 0.7 of the posix
// back-end's rate, at 64 1.0); on an object store kDefaultInFlight
// requests, each a connection (and its chunk held).
constexpr index_t kFolderBytesInFlight = index_t{32} << 20;
int in_flight_for(int given, const std::string& place, index_t chunk_bytes) {
  if (given > 0) return given;
  if (s3::is_s3_url(place)) return msv4::kDefaultInFlight;
  return static_cast<int>(
      std::clamp<index_t>(kFolderBytesInFlight / std::max<index_t>(chunk_bytes, 1), 8, 64));
}

class Msv4Backend final : public Backend {
 public:
  explicit Msv4Backend(Msv4Options options)
      : in_flight_(options.in_flight), files_ahead_(options.files_ahead) {}
  ~Msv4Backend() override { abort(); }
  std::string_view name() const override { return "msv4"; }
  std::string durability() const override {
    return store_ ? store_->durability()
                  : "each file written back, then a syncfs on a local file system, else an "
                    "fsync of every file; on S3 each object acknowledged";
  }
  // A chunk in single precision and its copy for the store (a chunk of 16 B
  // values), and the puts in flight on an object store, half a chunk each
  // (a folder's are in the page cache).
  index_t held_chunks() const override {
    return 1 + ((in_flight_ > 0 ? in_flight_ : msv4::kDefaultInFlight) + 1) / 2;
  }
  index_t stored_value_bytes() const override { return static_cast<index_t>(sizeof(Cell)); }
  StoredForm stored_form() const override { return StoredForm::single_conjugated; }

  // Its own MSv4's keys removed: the set is its claim's, which drops it.
  void abort() noexcept override {
    if (store_ && !group_.empty()) store_->remove_all(group_ + "/");
    store_.reset();
    group_.clear();
  }

 protected:
  void do_open(const std::string& partial) override {
    const auto& l = layout();
    grid_ = msv4::grid_of(l);
    group_ = msv4::msv4_name(msv4::set_stem(partial), l.file);
    store_ = msv4::zarr_store_at(
        partial, in_flight_for(in_flight_, partial, grid_.chunk_values() * stored_value_bytes()));
    nodes_ = msv4::describe_msv4(l, grid_);
    cells_.assign(static_cast<std::size_t>(grid_.chunk_values()), {});
    for (const auto& array : nodes_.arrays) {
      store_->put(key(array.path + "/zarr.json"), dump(array.doc));
      const std::vector<index_t> first(array.doc["shape"].size(), 0);
      store_->put(msv4::chunk_key(key(array.path), first), array.bytes);
    }
    for (const auto& [path, doc] : nodes_.chunked.items())
      store_->put(key(path + "/zarr.json"), dump(doc));
    for (const auto& [path, doc] : nodes_.groups.items())
      store_->put(key(path + "/zarr.json"), dump(doc));
    write_uvw();
    if (files_ahead_) reserve_chunks();
    store_->flush();
  }

  // A whole chunk inside the edges, single and conjugated by the pusher,
  // with the CRC-32 of its cells: put as it is.
  void do_write_stored(const ChunkKey& k, const void* cells) override {
    put_visibilities(k, static_cast<const Cell*>(cells));
    record_crc32(k, *given_crc32());
  }

  void do_write_chunk(const ChunkKey& k, const cplx* data, bool accumulate,
                      const PresenceWord* present) override {
    const auto& l = layout();
    const index_t n = l.chunk_values();
    auto& flags = flags_;  // kept: no allocation a chunk
    flags.assign(static_cast<std::size_t>(n), false);
    if (accumulate) {
      read_back(k, flags);
    } else {
      std::fill(cells_.begin(), cells_.end(), Cell());
      if (present) std::fill(flags.begin(), flags.end(), true);
    }
    for (index_t i = 0; i < n; ++i) {
      if (present && !storage::present(present, i)) continue;
      cells_[static_cast<std::size_t>(i)] +=
          Cell(static_cast<float>(data[i].real()), static_cast<float>(-data[i].imag()));
      flags[static_cast<std::size_t>(i)] = false;
    }
    clear_past_edges(k, flags);
    const bool any_flagged = std::find(flags.begin(), flags.end(), true) != flags.end();
    if (any_flagged || accumulate) put_flags(k, flags);
    record_crc32(k, crc_inside(k, cells_.data()));
    put_visibilities(k, cells_.data());
  }

  void do_flush() override { store_->flush(); }

  // The chunks never written flagged, the checksums, then the MSv4's
  // group with its nodes consolidated: the last of its keys.
  void do_close() override {
    flag_unwritten();
    store_->put(key(msv4::kChunksKey), bookkeeping());
    store_->flush();
    store_->put(key("zarr.json"), dump(nodes_.group_doc()));
    store_->flush();
    store_.reset();
    group_.clear();
  }

 private:
  std::string key(const std::string& path) const { return group_ + "/" + path; }
  static msv4::Bytes dump(const nlohmann::json& doc) {
    const std::string text = doc.dump(2);
    const auto* b = reinterpret_cast<const std::byte*>(text.data());
    return {b, b + text.size()};
  }

  // Chunk `k`'s cells (iotest's order, a whole chunk) as VISIBILITY's chunk.
  void put_visibilities(const ChunkKey& k, const Cell* cells) {
    const auto values = static_cast<std::size_t>(grid_.chunk_values());
    store_->put_copy(msv4::chunk_key(key("VISIBILITY"), grid_.chunk_of(k)),
                     std::as_bytes(std::span(cells, values)));
  }

  // A chunk written before, into cells_ and `flags` (a part that came late).
  void read_back(const ChunkKey& k, std::vector<bool>& flags) {
    const auto index = grid_.chunk_of(k);
    const auto bytes = store_->get(msv4::chunk_key(key("VISIBILITY"), index));
    if (!bytes)
      throw storage_failure(fmt::format("msv4: chunk {} written before is not there", index[0]));
    std::memcpy(cells_.data(), bytes->data(),
                std::min(bytes->size(), cells_.size() * sizeof(Cell)));
    const auto flag_bytes = store_->get(msv4::chunk_key(key("FLAG"), index));
    if (!flag_bytes) return;  // none flagged
    for (std::size_t i = 0; i < flags.size() && i < flag_bytes->size(); ++i)
      flags[i] = (*flag_bytes)[i] != std::byte{0};
  }

  void put_flags(const ChunkKey& k, const std::vector<bool>& flags) {
    msv4::Bytes chunk(flags.size());
    for (std::size_t i = 0; i < flags.size(); ++i) chunk[i] = std::byte{flags[i]};
    store_->put(msv4::chunk_key(key("FLAG"), grid_.chunk_of(k)), std::move(chunk));
  }

  // Past the observation's edges a chunk is padding: never flagged.
  void clear_past_edges(const ChunkKey& k, std::vector<bool>& flags) const {
    const auto& l = layout();
    const index_t rows = std::min(l.time_chunk, l.rows() - k.row_chunk * l.time_chunk);
    const index_t channels = std::min(l.freq_chunk, l.channels - k.freq_chunk * l.freq_chunk);
    for (index_t r = 0; r < l.time_chunk; ++r)
      for (index_t c = 0; c < l.freq_chunk; ++c)
        if (r >= rows || c >= channels)
          flags[static_cast<std::size_t>(r * l.freq_chunk + c)] = false;
  }

  // The CRC-32 of a chunk's cells inside the observation, iotest's order
  // (the ms back-end's: MsReader::chunk_checksum gives the same).
  std::uint32_t crc_inside(const ChunkKey& k, const Cell* cells) const {
    const auto& l = layout();
    const index_t rows = std::min(l.time_chunk, l.rows() - k.row_chunk * l.time_chunk);
    const index_t channels = std::min(l.freq_chunk, l.channels - k.freq_chunk * l.freq_chunk);
    const auto row_bytes = channels * static_cast<index_t>(sizeof(Cell));
    if (channels == l.freq_chunk) return chunk_crc32(cells, rows * row_bytes);
    std::uint32_t crc = 0;
    for (index_t r = 0; r < rows; ++r) crc = chunk_crc32(cells + r * l.freq_chunk, row_bytes, crc);
    return crc;
  }

  // Every VISIBILITY chunk of this file made ahead (msv4.files=ahead).
  void reserve_chunks() {
    const auto& l = layout();
    for (index_t rc = 0; rc < l.row_chunks(); ++rc)
      for (index_t fc = l.first_freq_chunk; fc < l.file_freq_chunk_end(); ++fc)
        store_->reserve(msv4::chunk_key(key("VISIBILITY"), grid_.chunk_of({rc, fc})));
  }

  // A stonewalled run's chunks never written: flagged (VISIBILITY's fill
  // value, 0, is what they read as), their files made ahead removed.
  void flag_unwritten() {
    const auto& l = layout();
    const std::vector<bool> all(static_cast<std::size_t>(l.chunk_values()), true);
    for (index_t rc = 0; rc < l.row_chunks(); ++rc)
      for (index_t fc = l.first_freq_chunk; fc < l.file_freq_chunk_end(); ++fc)
        if (!written({rc, fc})) {
          if (files_ahead_)
            store_->remove(msv4::chunk_key(key("VISIBILITY"), grid_.chunk_of({rc, fc})));
          auto flags = all;
          clear_past_edges({rc, fc}, flags);
          put_flags({rc, fc}, flags);
        }
  }

  // UVW for every (time, baseline), antenna 1 minus antenna 2 (the MS's
  // convention), in chunks of about kUvwChunkBytes.
  void write_uvw() {
    const auto& l = layout();
    const auto& obs = *l.observation;
    const auto shape = msv4::uvw_chunk_shape(l.times, l.baselines);
    const auto pairs = obs.baselines();
    for (index_t t0 = 0, ti = 0; t0 < l.times; t0 += shape[0], ++ti) {
      std::vector<std::vector<telescope::Uvw>> antennas;
      for (index_t t = t0; t < std::min(l.times, t0 + shape[0]); ++t)
        antennas.push_back(obs.antenna_uvw(t));
      for (index_t b0 = 0, bi = 0; b0 < l.baselines; b0 += shape[1], ++bi) {
        std::vector<double> chunk(static_cast<std::size_t>(shape[0] * shape[1] * 3), 0.0);
        for (index_t t = 0; t < static_cast<index_t>(antennas.size()); ++t)
          for (index_t b = b0; b < std::min(l.baselines, b0 + shape[1]); ++b) {
            const auto [p, q] = pairs[static_cast<std::size_t>(b)];
            const auto& u1 = antennas[static_cast<std::size_t>(t)][static_cast<std::size_t>(p)];
            const auto& u2 = antennas[static_cast<std::size_t>(t)][static_cast<std::size_t>(q)];
            double* cell = &chunk[static_cast<std::size_t>((t * shape[1] + b - b0) * 3)];
            cell[0] = u1.u - u2.u, cell[1] = u1.v - u2.v, cell[2] = u1.w - u2.w;
          }
        store_->put(msv4::chunk_key(key("UVW"), std::vector<index_t>{ti, bi, 0}),
                    msv4::as_bytes(chunk));
      }
    }
  }

  // Each chunk's CRC-32 and a stonewalled run's parts (msv4::kChunksKey).
  msv4::Bytes bookkeeping() const {
    std::vector<std::int64_t> words{msv4::kChunksMagic,
                                    static_cast<std::int64_t>(checksums().size()),
                                    static_cast<std::int64_t>(written_parts().size())};
    for (const auto& c : checksums()) words.insert(words.end(), {c.chunk, std::int64_t{c.crc32}});
    for (const auto& p : written_parts())
      words.insert(words.end(), {p.w_stack, p.subgrid, p.row_chunk_begin, p.row_chunk_end});
    return msv4::as_bytes(words);
  }

  const int in_flight_;
  const bool files_ahead_;
  std::unique_ptr<msv4::ZarrStore> store_;
  std::string group_;  // this writer's MSv4: "vis_0"
  msv4::Msv4Grid grid_;
  msv4::Msv4Nodes nodes_;
  // A chunk as VISIBILITY stores it, iotest's order; page-aligned, so that
  // a folder store writes it past the page cache (folder_store.cpp).
  std::vector<Cell, PageAligned<Cell>> cells_;
  std::vector<bool> flags_;  // and its flags, for a part or an accumulation
};

Msv4Options msv4_options(const StorageOptions& options) {
  Msv4Options o;
  o.files_ahead = option_choice(options, "msv4.files", "ahead", {"ahead", "as-written"}) == "ahead";
  const auto it = options.values.find("msv4.in-flight");
  if (it == options.values.end() || it->second == "auto") return o;
  try {
    std::size_t used = 0;
    o.in_flight = std::stoi(it->second, &used);
    if (used == it->second.size() && o.in_flight >= 1 && o.in_flight <= 256) return o;
  } catch (const std::exception&) {
  }
  throw UsageError(
      "--msv4.in-flight",
      fmt::format("expected auto or a count of writes from 1 to 256, got '{}'", it->second));
}

}  // namespace

BackendSpec msv4_spec() {
  BackendSpec s;
  s.name = "msv4";
  s.summary =
      "one MSv4 processing set (xradio's zarr) for the run, an MSv4 per writer's frequency "
      "range, on a folder or an S3 store (s3://BUCKET/KEY.ps.zarr), as xradio reads";
  s.store = &msv4::processing_set_store();
  s.names = ".zarr";
  s.named_by = [](const std::string& path) {
    return path.ends_with(".zarr") || path.ends_with(".zarr/");
  };
  s.shared = true;
  s.files_by_frequency = true;
  s.time_chunk_problem = &msv4::time_chunk_problem;
  s.options = {
      {"msv4.in-flight",
       "writes kept going at once, each on a thread: files being written back, or objects "
       "being sent; auto: 32 MiB of chunks on a folder (8 to 64), 8 on an object store",
       false, "auto"},
      {"msv4.files",
       "when a folder's chunk files are made: ahead (at open, as HDF5 allocates chunks; the "
       "report's open time) or as-written (each as its chunk comes)",
       false, "ahead"},
  };
  s.make = [](const StorageOptions& options) -> std::unique_ptr<Backend> {
    return std::make_unique<Msv4Backend>(msv4_options(options));
  };
  s.recognises = &msv4::Msv4Reader::recognises;
  s.open = [](const std::string& path, const StorageOptions&) -> std::unique_ptr<Reader> {
    return std::make_unique<msv4::Msv4Reader>(path);
  };
  return s;
}

}  // namespace iotest::storage
