#include "iotest/storage/msv4/msv4_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "iotest/common/errors.hpp"
#include "iotest/storage/provenance_json.hpp"
#include "iotest/storage/s3/object_url.hpp"

namespace iotest::storage::msv4 {

// Chunks, UVW and the bookkeeping are little-endian (the "bytes" codec's
// "endian": "little"), read as they lie.
static_assert(std::endian::native == std::endian::little, "msv4 reads little-endian values as is");

// Helpers named apart: the library is built in unity batches, where
// another file's anonymous namespace is this one's.
namespace msv4_reading {
namespace {

using nlohmann::json;

json parse_json(const Bytes& bytes) {
  const auto* text = reinterpret_cast<const char*>(bytes.data());
  return json::parse(text, text + bytes.size());
}

// The layout keys every MSv4 of one set shares (the observation's axes and
// chunks, and how its checksums were taken).
constexpr const char* kSharedKeys[] = {"baselines",    "times",      "channels",
                                       "time_chunk",   "freq_chunk", "freq_start_hz",
                                       "freq_step_hz", "files",      "checksum_of"};

// Array `array`'s chunk shape from its description in the consolidated
// metadata, checked to be what iotest writes: `type` values of `shape`,
// raw little-endian chunks (the "bytes" codec alone) under '/' keys. A
// set of other codecs (compressed, say) would be read as garbage.
std::vector<index_t> raw_chunk_shape(const json& metadata, const std::string& array,
                                     const char* type, const std::vector<index_t>& shape,
                                     const std::string& path) {
  const auto it = metadata.find(array);
  if (it == metadata.end() || it->value("node_type", "") != "array")
    throw UsageError(path, fmt::format("not a complete processing set: its consolidated "
                                       "metadata has no array {}",
                                       array));
  const json& doc = *it;
  if (doc.at("data_type") != type)
    throw UsageError(
        path, fmt::format("{} holds {}, expected {}", array, doc.at("data_type").dump(), type));
  if (doc.at("shape").get<std::vector<index_t>>() != shape)
    throw UsageError(path, fmt::format("{} has shape {}, expected {}", array,
                                       doc.at("shape").dump(), json(shape).dump()));
  const json& codecs = doc.at("codecs");
  if (codecs.size() != 1 || codecs[0].at("name") != "bytes" ||
      codecs[0].value("configuration", json::object()).value("endian", "little") != "little")
    throw UsageError(path, fmt::format("{} is stored with codecs {}: iotest reads only the raw "
                                       "little-endian chunks it writes",
                                       array, codecs.dump()));
  if (const auto enc = doc.find("chunk_key_encoding"); enc != doc.end())
    if (enc->at("name") != "default" ||
        enc->value("configuration", json::object()).value("separator", "/") !=
            std::string(1, kChunkSeparator))
      throw UsageError(path, fmt::format("{} names its chunks {}: iotest reads only the "
                                         "default encoding with '{}'",
                                         array, enc->dump(), kChunkSeparator));
  const json& grid = doc.at("chunk_grid");
  auto chunks = grid.at("configuration").at("chunk_shape").get<std::vector<index_t>>();
  if (grid.at("name") != "regular" || chunks.size() != shape.size() ||
      std::any_of(chunks.begin(), chunks.end(), [](index_t n) { return n < 1; }))
    throw UsageError(path, fmt::format("{} has chunk grid {}, expected a regular one of {} axes",
                                       array, grid.dump(), shape.size()));
  return chunks;
}

index_t ceil_div(index_t a, index_t b) {
  return (a + b - 1) / b;
}

}  // namespace
}  // namespace msv4_reading

bool Msv4Reader::recognises(const std::string& path) {
  try {
    // A folder: its zarr.json looked for first, cheaply (and without the
    // folder store's making a folder that is not there).
    if (!s3::is_s3_url(path) &&
        !std::filesystem::is_regular_file(std::filesystem::path(path) / kRootKey))
      return false;
    const auto bytes = zarr_store_at(path, 1)->get(kRootKey);
    return bytes &&
           msv4_reading::parse_json(*bytes).at("attributes").at("type") == "processing_set";
  } catch (...) {  // unreadable, malformed, an S3 store with no credentials: not one
    return false;
  }
}

Msv4Reader::Msv4Reader(const std::string& path) : path_(path) {
  try {
    if (!s3::is_s3_url(path) && !std::filesystem::is_directory(path))
      throw UsageError(path, "cannot open: no such folder");
    // One slot: a reader only gets (its puts' threads would idle).
    store_ = zarr_store_at(path, 1);
    const auto root_bytes = store_->get(kRootKey);
    if (!root_bytes)
      throw UsageError(path,
                       "not a complete processing set: no zarr.json (a run that did not "
                       "finish leaves none)");
    const nlohmann::json root = msv4_reading::parse_json(*root_bytes);
    if (root.value("node_type", "") != "group" ||
        root.value("attributes", nlohmann::json::object()).value("type", "") != "processing_set")
      throw UsageError(path,
                       "its zarr.json is not a processing set's (no attribute "
                       "type = \"processing_set\")");
    const auto consolidated = root.find("consolidated_metadata");
    if (consolidated == root.end() || !consolidated->is_object() ||
        !consolidated->contains("metadata") || !consolidated->at("metadata").is_object())
      throw UsageError(path,
                       "its zarr.json has no consolidated metadata: iotest reads only "
                       "the processing sets it wrote");
    const nlohmann::json& metadata = consolidated->at("metadata");
    read_layouts(metadata);
    check_arrays(metadata);
    check_coverage();
    present_.assign(static_cast<size_t>(chunks_expected()), false);
    for (const auto& m : msv4s_) {
      list_chunks(m);
      read_bookkeeping(m);
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path, fmt::format("its zarr metadata is malformed: {}", e.what()));
  } catch (const std::logic_error& e) {  // grid_of's: a time chunk msv4 cannot store
    throw UsageError(path, e.what());
  }
  // The store's own failures (I/O, S3) go on as they are: not the user's.
}

Msv4Reader::~Msv4Reader() = default;

// The MSv4 groups with iotest's attribute, the first (by frequency) giving
// the observation's axes and provenance, every other checked against it.
void Msv4Reader::read_layouts(const nlohmann::json& metadata) {
  std::vector<std::pair<std::string, nlohmann::json>> found;
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    const nlohmann::json& doc = it.value();
    if (it.key().find('/') != std::string::npos || !doc.is_object() ||
        doc.value("node_type", "") != "group")
      continue;
    const auto attributes = doc.find("attributes");
    if (attributes != doc.end() && attributes->contains(kLayoutAttribute))
      found.emplace_back(it.key(), attributes->at(kLayoutAttribute));
  }
  if (found.empty())
    throw UsageError(path_, fmt::format("a processing set, but not iotest's (no MSv4 with an "
                                        "\"{}\" attribute): iotest reads only the processing "
                                        "sets it wrote",
                                        kLayoutAttribute));
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.second.at("first_freq_chunk").template get<index_t>() <
           b.second.at("first_freq_chunk").template get<index_t>();
  });
  take_axes(found.front().second);
  for (const auto& [name, layout] : found) {
    check_same_set(name, layout, found.front().second);
    msv4s_.push_back(msv4_from(name, layout));
  }
}

// The observation's axes, chunks and provenance, as MsReader takes them
// from its IOTEST_LAYOUT keyword.
void Msv4Reader::take_axes(const nlohmann::json& layout) {
  nbls_ = layout.at("baselines").get<index_t>();
  ntimes_ = layout.at("times").get<index_t>();
  nfreqs_ = layout.at("channels").get<index_t>();
  chunk_rows_ = layout.at("time_chunk").get<index_t>();
  chunk_channels_ = layout.at("freq_chunk").get<index_t>();
  if (chunk_rows_ < 1 || chunk_channels_ < 1 || nbls_ < 1 || ntimes_ < 1 || nfreqs_ < 1)
    throw UsageError(path_, fmt::format("its \"{}\" attribute is malformed: {}", kLayoutAttribute,
                                        layout.dump()));
  // The only checksums msv4 takes (those of the cells as stored).
  if (layout.value("checksum_of", "") != kChecksumOfStoredCells)
    throw UsageError(
        path_, fmt::format("its \"{}\" attribute has checksum_of {}, expected "
                           "\"{}\"",
                           kLayoutAttribute, layout.value("checksum_of", nlohmann::json()).dump(),
                           kChecksumOfStoredCells));
  if (!layout.at("provenance").is_null()) provenance_ = provenance_from(layout.at("provenance"));
  const double start = layout.at("freq_start_hz").get<double>();
  const double step = layout.at("freq_step_hz").get<double>();
  freq_.resize(static_cast<size_t>(nfreqs_));
  for (index_t k = 0; k < nfreqs_; ++k) freq_[static_cast<size_t>(k)] = start + step * k;
}

// Every MSv4 of a set is of one run of one observation: the same axes and
// run (its provenance's nonce; the host may differ, one per writer).
void Msv4Reader::check_same_set(const std::string& name, const nlohmann::json& layout,
                                const nlohmann::json& first) const {
  for (const char* key : msv4_reading::kSharedKeys)
    if (layout.value(key, nlohmann::json()) != first.value(key, nlohmann::json()))
      throw UsageError(path_, fmt::format("its MSv4 {} has {} {}, another {}: not one set", name,
                                          key, layout.value(key, nlohmann::json()).dump(),
                                          first.value(key, nlohmann::json()).dump()));
  const nlohmann::json& p = layout.at("provenance");
  const nlohmann::json& q = first.at("provenance");
  if (p.is_null() != q.is_null() ||
      (!p.is_null() && p.value("nonce", nlohmann::json()) != q.value("nonce", nlohmann::json())))
    throw UsageError(path_, fmt::format("its MSv4 {} is of another run than the rest (its "
                                        "provenance differs)",
                                        name));
}

// An MSv4's frequency range, which must be whole frequency chunks of the
// observation's (FileSplit's), and its zarr chunk grid.
Msv4Reader::Msv4 Msv4Reader::msv4_from(const std::string& name,
                                       const nlohmann::json& layout) const {
  Msv4 m;
  m.name = name;
  m.file = layout.at("file").get<index_t>();
  const index_t first_chunk = layout.at("first_freq_chunk").get<index_t>();
  const index_t first_channel = layout.at("first_channel").get<index_t>();
  const index_t own_channels = layout.at("file_channels").get<index_t>();
  VisibilityLayout l;
  l.baselines = nbls_;
  l.times = ntimes_;
  l.channels = nfreqs_;
  l.time_chunk = chunk_rows_;
  l.freq_chunk = chunk_channels_;
  l.first_freq_chunk = first_chunk;
  l.file_freq_chunks = own_channels < 1 ? 0 : msv4_reading::ceil_div(own_channels, chunk_channels_);
  if (first_chunk < 0 || own_channels < 1 || first_channel != first_chunk * chunk_channels_ ||
      first_chunk + l.file_freq_chunks > channel_chunks() || l.file_channels() != own_channels)
    throw UsageError(path_, fmt::format("its MSv4 {} holds channels {}+{} (from frequency chunk "
                                        "{}): not whole chunks of {} of the {} observed",
                                        name, first_channel, own_channels, first_chunk,
                                        chunk_channels_, nfreqs_));
  m.first_freq_chunk = first_chunk;
  m.freq_chunk_end = first_chunk + l.file_freq_chunks;
  m.grid = grid_of(l);
  return m;
}

// VISIBILITY as the grid says (its chunk is an iotest chunk), and UVW's
// chunks (the first MSv4's: every one holds the same).
void Msv4Reader::check_arrays(const nlohmann::json& metadata) {
  for (const auto& m : msv4s_) {
    const auto& g = m.grid;
    const auto array = m.name + "/VISIBILITY";
    const auto chunks = msv4_reading::raw_chunk_shape(metadata, array, "complex64",
                                                      {g.times, g.baselines, g.channels, 1}, path_);
    const std::vector<index_t> expected{g.chunk_times, 1, g.chunk_channels, 1};
    if (chunks != expected)
      throw UsageError(
          path_, fmt::format("{} has chunks {}, expected {} (iotest's chunk of {} "
                             "rows and {} channels)",
                             array, nlohmann::json(chunks).dump(), nlohmann::json(expected).dump(),
                             chunk_rows_, chunk_channels_));
  }
  uvw_.array = msv4s_.front().name + "/UVW";
  const auto chunks =
      msv4_reading::raw_chunk_shape(metadata, uvw_.array, "float64", {ntimes_, nbls_, 3}, path_);
  if (chunks[2] < 3)
    throw UsageError(path_, fmt::format("{} has chunks {}: expected (u, v, w) in one chunk",
                                        uvw_.array, nlohmann::json(chunks).dump()));
  uvw_.chunk_times = chunks[0];
  uvw_.chunk_baselines = chunks[1];
  uvw_.chunk_labels = chunks[2];
}

// Each frequency chunk of the observation in exactly one MSv4: the set
// split by frequency as FileSplit does, every file there (zarr.json is
// written after every MSv4 is).
void Msv4Reader::check_coverage() {
  msv4_of_freq_.assign(static_cast<size_t>(channel_chunks()), -1);
  for (size_t i = 0; i < msv4s_.size(); ++i)
    for (index_t f = msv4s_[i].first_freq_chunk; f < msv4s_[i].freq_chunk_end; ++f) {
      auto& holder = msv4_of_freq_[static_cast<size_t>(f)];
      if (holder >= 0)
        throw UsageError(path_,
                         fmt::format("its MSv4s {} and {} both hold frequency chunk {}",
                                     msv4s_[static_cast<size_t>(holder)].name, msv4s_[i].name, f));
      holder = static_cast<index_t>(i);
    }
  const auto gap = std::find(msv4_of_freq_.begin(), msv4_of_freq_.end(), -1);
  if (gap != msv4_of_freq_.end())
    throw UsageError(path_, fmt::format("not a complete processing set: no MSv4 holds frequency "
                                        "chunk {} (channels from {})",
                                        gap - msv4_of_freq_.begin(),
                                        (gap - msv4_of_freq_.begin()) * chunk_channels_));
}

// The VISIBILITY chunks there, each an iotest chunk (no read of any).
void Msv4Reader::list_chunks(const Msv4& m) {
  const auto& g = m.grid;
  const std::string prefix = m.name + "/VISIBILITY/";
  const std::array<index_t, 3> extent{msv4_reading::ceil_div(g.times, g.chunk_times), g.baselines,
                                      msv4_reading::ceil_div(g.channels, g.chunk_channels)};
  for (const auto& key : store_->list(prefix)) {
    std::string_view rest = key;
    if (rest.starts_with(prefix)) rest.remove_prefix(prefix.size());
    std::array<index_t, 4> index{};
    if (!parse_chunk_key(rest, index)) continue;
    if (index[0] >= extent[0] || index[1] >= extent[1] || index[2] >= extent[2] || index[3] != 0)
      throw UsageError(path_, fmt::format("{} lies past VISIBILITY's chunk grid", key));
    const ChunkKey chunk = g.key_of(index[0], index[1], index[2]);
    auto&& present = present_[static_cast<size_t>(chunk_index(chunk))];
    if (!present) ++present_count_;
    present = true;
  }
}

// The MSv4's "iotest/chunks": its checksums and a stonewalled run's
// written parts (msv4_layout.hpp), one get, O(chunks it holds).
void Msv4Reader::read_bookkeeping(const Msv4& m) {
  const std::string key = m.name + "/" + kChunksKey;
  const auto bytes = store_->get(key);
  if (!bytes) throw UsageError(path_, fmt::format("not a complete processing set: no {}", key));
  std::vector<std::int64_t> words(bytes->size() / sizeof(std::int64_t));
  std::memcpy(words.data(), bytes->data(), words.size() * sizeof(std::int64_t));
  const auto n = static_cast<std::int64_t>(words.size());
  const bool framed = bytes->size() % sizeof(std::int64_t) == 0 && n >= 3 &&
                      words[0] == kChunksMagic && words[1] >= 0 && words[2] >= 0 && words[1] <= n &&
                      words[2] <= n && 3 + 2 * words[1] + 4 * words[2] == n;
  if (!framed)
    throw UsageError(path_, fmt::format("{} is malformed ({} bytes): not completely written", key,
                                        bytes->size()));
  const std::int64_t* w = words.data() + 3;
  for (std::int64_t i = 0; i < words[1]; ++i, w += 2) {
    const bool own = w[0] >= 0 && w[0] < chunks_expected() &&
                     w[0] % channel_chunks() >= m.first_freq_chunk &&
                     w[0] % channel_chunks() < m.freq_chunk_end;
    if (!own || w[1] < 0 || w[1] > 0xffffffffLL)
      throw UsageError(path_, fmt::format("{} lists chunk {} (CRC-32 {}), not one of {}'s", key,
                                          w[0], w[1], m.name));
    checksums_.push_back({w[0], static_cast<std::uint32_t>(w[1])});
  }
  for (std::int64_t i = 0; i < words[2]; ++i, w += 4) parts_.push_back({w[0], w[1], w[2], w[3]});
}

const Msv4Reader::Msv4& Msv4Reader::msv4_of(index_t freq_chunk) const {
  return msv4s_[static_cast<size_t>(msv4_of_freq_[static_cast<size_t>(freq_chunk)])];
}

bool Msv4Reader::chunk_present(index_t row, index_t channel) const {
  return present_[static_cast<size_t>(chunk_index({row / chunk_rows_, channel / chunk_channels_}))];
}

bool Msv4Reader::load(const ChunkKey& key) const {
  const index_t chunk = chunk_index(key);
  if (chunk == cells_chunk_) return true;
  if (!present_[static_cast<size_t>(chunk)]) return false;
  const Msv4& m = msv4_of(key.freq_chunk);
  const std::string name = chunk_key(m.name + "/VISIBILITY", m.grid.chunk_of(key));
  const auto bytes = store_->get(name);
  if (!bytes) throw UsageError(path_, fmt::format("{} was listed, but is gone", name));
  // zarr stores a chunk whole, padded at the array's edges.
  const auto values = static_cast<size_t>(m.grid.chunk_values());
  if (bytes->size() != values * sizeof(std::complex<float>))
    throw UsageError(path_, fmt::format("{} holds {} bytes, expected {} (a whole chunk of "
                                        "complex64)",
                                        name, bytes->size(), values * sizeof(std::complex<float>)));
  cells_chunk_ = -1;  // until cells_ holds it whole
  cells_.resize(values);
  std::memcpy(cells_.data(), bytes->data(), bytes->size());
  cells_chunk_ = chunk;
  return true;
}

bool Msv4Reader::read_chunk(const ChunkKey& key, cplx* out) const {
  if (!load(key)) return false;
  const index_t n = chunk_rows_ * chunk_channels_;  // the grid's chunk_values()
  for (index_t i = 0; i < n; ++i) {
    const auto v = cells_[static_cast<size_t>(i)];
    out[i] = cplx(v.real(), -v.imag());  // iotest's sign convention (ms_reader.hpp)
  }
  zero_past_edges(key, out);
  return true;
}

cplx Msv4Reader::visibility(index_t row, index_t channel) const {
  // An absent chunk reads as zarr's fill value (zero), as posix's does.
  if (!load({row / chunk_rows_, channel / chunk_channels_})) return {};
  const auto v =
      cells_[static_cast<size_t>(row % chunk_rows_ * chunk_channels_ + channel % chunk_channels_)];
  return {v.real(), -v.imag()};
}

// As MsReader's: the CRC-32 of the chunk's cells inside the observation,
// back as VISIBILITY holds them (complex64, conjugated, channels fastest,
// rows in iotest's order).
std::uint32_t Msv4Reader::chunk_checksum(const ChunkKey& key, const cplx* chunk) const {
  const index_t rows = std::min(chunk_rows_, nbls_ * ntimes_ - key.row_chunk * chunk_rows_);
  const index_t channels = std::min(chunk_channels_, nfreqs_ - key.freq_chunk * chunk_channels_);
  checksum_cells_.resize(static_cast<size_t>(rows * channels));
  for (index_t r = 0, o = 0; r < rows; ++r)
    for (index_t c = 0; c < channels; ++c, ++o) {
      const cplx v = chunk[r * chunk_channels_ + c];
      checksum_cells_[static_cast<size_t>(o)] = {static_cast<float>(v.real()),
                                                 static_cast<float>(-v.imag())};
    }
  return chunk_crc32(checksum_cells_.data(),
                     static_cast<index_t>(checksum_cells_.size() * sizeof(checksum_cells_[0])));
}

// The chunks present in the order their writers wrote them (their
// checksums' order, MSv4 after MSv4): the imaging direction's visit order.
std::vector<ChunkKey> Msv4Reader::stored_chunks() const {
  std::vector<ChunkKey> keys;
  keys.reserve(static_cast<size_t>(present_count_));
  std::vector<bool> taken(present_.size(), false);
  const auto take = [&](index_t chunk) {
    const auto at = static_cast<size_t>(chunk);
    if (!present_[at] || taken[at]) return;
    taken[at] = true;
    keys.push_back({chunk / channel_chunks(), chunk % channel_chunks()});
  };
  for (const auto& c : checksums_) take(c.chunk);
  for (index_t i = 0; i < static_cast<index_t>(present_.size()); ++i) take(i);  // unlisted ones
  return keys;
}

// (u, v, w) of a row from the first MSv4's UVW, a chunk at a time (the
// array is the observation's size: never read whole).
std::array<double, 3> Msv4Reader::uvw(index_t row) const {
  auto& u = uvw_;
  const index_t t = row % ntimes_, b = row / ntimes_;
  const std::array<index_t, 2> chunk{t / u.chunk_times, b / u.chunk_baselines};
  if (chunk != u.chunk) {
    const std::string key = chunk_key(u.array, std::vector<index_t>{chunk[0], chunk[1], 0});
    const auto bytes = store_->get(key);
    if (!bytes) throw UsageError(path_, fmt::format("not a complete processing set: no {}", key));
    const auto values = static_cast<size_t>(u.chunk_times * u.chunk_baselines * u.chunk_labels);
    if (bytes->size() != values * sizeof(double))
      throw UsageError(path_, fmt::format("{} holds {} bytes, expected {} (a whole chunk of "
                                          "float64)",
                                          key, bytes->size(), values * sizeof(double)));
    u.chunk = {-1, -1};
    u.values.resize(values);
    std::memcpy(u.values.data(), bytes->data(), bytes->size());
    u.chunk = chunk;
  }
  const double* v = &u.values[static_cast<size_t>(
      ((t % u.chunk_times) * u.chunk_baselines + b % u.chunk_baselines) * u.chunk_labels)];
  return {-v[0], -v[1], -v[2]};  // iotest's: antenna 2 minus antenna 1, as MsReader's
}

}  // namespace iotest::storage::msv4
