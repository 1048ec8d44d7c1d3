#include "iotest/storage/ms/ms_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "iotest/common/errors.hpp"
#include "iotest/storage/provenance_json.hpp"

namespace iotest::storage::ms {

bool MsReader::recognises(const std::string& path) {
  return std::filesystem::is_directory(path) &&
         std::filesystem::exists(std::filesystem::path(path) / "table.dat");
}

MsReader::MsReader(const std::string& path) : path_(path) {
  const std::lock_guard<std::mutex> hold(library_lock());
  try {
    table_ = std::make_unique<TableReader>(path);
    const TableReader& t = *table_;
    if (!t.has_keyword(kLayoutKeyword))
      throw UsageError(path, fmt::format("a MeasurementSet, but not iotest's (no {} keyword): "
                                         "iotest reads only the MeasurementSets it wrote",
                                         kLayoutKeyword));
    for (const char* c : {"DATA", "FLAG", "UVW", "TIME", "ANTENNA1", "ANTENNA2"})
      if (!t.has_column(c))
        throw UsageError(path, fmt::format("not a complete MeasurementSet: no column {}", c));
    const auto doc = nlohmann::json::parse(t.keyword(kLayoutKeyword));
    nbls_ = doc.at("baselines").get<index_t>();
    ntimes_ = doc.at("times").get<index_t>();
    nfreqs_ = doc.at("channels").get<index_t>();
    chunk_rows_ = doc.at("time_chunk").get<index_t>();
    chunk_channels_ = doc.at("freq_chunk").get<index_t>();
    checksum_of_stored_ = doc.value("checksum_of", "") == kChecksumOfStoredCells;
    if (!doc.at("provenance").is_null()) provenance_ = provenance_from(doc.at("provenance"));
    if (chunk_rows_ < 1 || chunk_channels_ < 1 || nbls_ < 1 || ntimes_ < 1 || nfreqs_ < 1)
      throw UsageError(path, fmt::format("its {} keyword is malformed", kLayoutKeyword));
    if (t.spectral_windows() != 1) throw UsageError(path, "expected one spectral window");
    read_channel_range(doc, t.channel_hz());
    // The chunks written, in write order, with their checksums.
    if (!t.has_keyword(kChunksTable))
      throw UsageError(path, fmt::format("has no {} subtable: not completely written", kChunksTable));
    std::string missing;
    const auto sums = t.int64_table(kChunksTable, {"CHUNK", "CRC32"}, missing);
    if (!missing.empty())
      throw UsageError(path, fmt::format("not a complete MeasurementSet: {} has no column {}",
                                         kChunksTable, missing));
    // Where each row chunk's rows are: time_chunk rows each.
    if (!t.has_keyword(kRowChunksTable))
      throw UsageError(path, fmt::format("has no {} subtable: not completely written",
                                         kRowChunksTable));
    const auto rows = t.int64_table(kRowChunksTable, {"ROW_CHUNK", "FIRST_ROW"}, missing);
    if (!missing.empty())
      throw UsageError(path, fmt::format("not a complete MeasurementSet: {} has no column {}",
                                         kRowChunksTable, missing));
    first_row_.assign(static_cast<size_t>(row_chunks()), -1);
    for (size_t i = 0; i + 1 < rows.size(); i += 2) {
      if (rows[i] < 0 || rows[i] >= row_chunks() || rows[i + 1] < 0 ||
          rows[i + 1] + chunk_rows_ > t.rows())
        throw UsageError(path, fmt::format("{} places row chunk {} at row {} of {}: not "
                                           "completely written",
                                           kRowChunksTable, rows[i], rows[i + 1], t.rows()));
      first_row_[static_cast<size_t>(rows[i])] = rows[i + 1];
    }
    present_.assign(static_cast<size_t>(chunks_expected()), false);
    for (size_t i = 0; i + 1 < sums.size(); i += 2) {
      const index_t chunk = sums[i];
      if (chunk < 0 || chunk >= chunks_expected())
        throw UsageError(path, fmt::format("{} lists chunk {} of {}", kChunksTable, chunk,
                                           chunks_expected()));
      if (first_row_[static_cast<size_t>(chunk / channel_chunks())] < 0 ||
          !holds_channel((chunk % channel_chunks()) * chunk_channels_))
        throw UsageError(path, fmt::format("{} lists chunk {}, whose cells are not in the table",
                                           kChunksTable, chunk));
      checksums_.push_back({chunk, static_cast<std::uint32_t>(sums[i + 1])});
      if (!present_[static_cast<size_t>(chunk)]) order_.push_back(chunk);
      present_[static_cast<size_t>(chunk)] = true;
    }
    if (provenance_ && provenance_->stonewalled) {
      if (!t.has_keyword(kPartsTable))
        throw UsageError(path, "is from a stonewalled run (--duration) but lists no written "
                               "parts: not completely written");
      const auto parts = t.int64_table(
          kPartsTable, {"W_STACK", "SUBGRID", "ROW_CHUNK_BEGIN", "ROW_CHUNK_END"}, missing);
      if (!missing.empty())
        throw UsageError(path, fmt::format("not a complete MeasurementSet: {} has no column {}",
                                           kPartsTable, missing));
      for (size_t i = 0; i + 3 < parts.size(); i += 4)
        parts_.push_back({parts[i], parts[i + 1], parts[i + 2], parts[i + 3]});
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path, fmt::format("its {} keyword is malformed: {}", kLayoutKeyword, e.what()));
  } catch (const UsageError&) {
    throw;
  } catch (const std::runtime_error& e) {  // casacore's, through ms_table
    throw UsageError(path, e.what());
  }
}

// This file's channels of the observation's. A MeasurementSet of a set
// split by frequency lists only its own channels in SPECTRAL_WINDOW; the
// observation's axis is in the layout keyword. One from before the split
// holds every channel.
void MsReader::read_channel_range(const nlohmann::json& doc, std::vector<double> own_hz) {
  first_channel_ = doc.value("first_channel", index_t{0});
  file_channels_ = doc.value("file_channels", nfreqs_);
  if (first_channel_ < 0 || file_channels_ < 1 || first_channel_ + file_channels_ > nfreqs_ ||
      first_channel_ % chunk_channels_ != 0)
    throw UsageError(path_, fmt::format("its {} keyword's channels {}+{} are not of the {} "
                                        "observed",
                                        kLayoutKeyword, first_channel_, file_channels_, nfreqs_));
  if (static_cast<index_t>(own_hz.size()) != file_channels_)
    throw UsageError(path_, "SPECTRAL_WINDOW's channels do not match the main table's");
  if (file_channels_ == nfreqs_) {
    freq_ = std::move(own_hz);
    return;
  }
  const double start = doc.at("freq_start_hz").get<double>();
  const double step = doc.at("freq_step_hz").get<double>();
  freq_.resize(static_cast<size_t>(nfreqs_));
  for (index_t k = 0; k < nfreqs_; ++k) freq_[static_cast<size_t>(k)] = start + step * k;
}

MsReader::~MsReader() {
  const std::lock_guard<std::mutex> hold(library_lock());
  table_.reset();
}

index_t MsReader::table_row(index_t row) const {
  const index_t first = first_row_[static_cast<size_t>(row / chunk_rows_)];
  return first < 0 ? -1 : first + row % chunk_rows_;
}

std::array<double, 3> MsReader::uvw(index_t row) const {
  if (const index_t at = table_row(row); at >= 0) {
    const std::lock_guard<std::mutex> hold(library_lock());
    const auto v = table_->uvw(at);
    return {-v[0], -v[1], -v[2]};  // iotest's: antenna 2 minus antenna 1
  }
  // A row this file does not hold: as the writer computed it.
  if (!provenance_) throw UsageError(path_, "holds no provenance to place rows it does not hold");
  if (!observation_) {
    observation_ = telescope::make_observation(provenance_->observation);
    baselines_ = observation_->baselines();
  }
  const auto& obs = *observation_;
  const auto [a1, a2] = baselines_[static_cast<size_t>(row / ntimes_)];
  const auto at = obs.antenna_uvw(row % ntimes_);
  const auto& p = at[static_cast<size_t>(a1)];
  const auto& q = at[static_cast<size_t>(a2)];
  return {q.u - p.u, q.v - p.v, q.w - p.w};
}

std::vector<WrittenPart> MsReader::written_parts() const { return parts_; }
std::vector<ChunkChecksum> MsReader::checksums() const { return checksums_; }

bool MsReader::chunk_present(index_t row, index_t channel) const {
  return present_[static_cast<size_t>((row / chunk_rows_) * channel_chunks() +
                                      channel / chunk_channels_)];
}

cplx MsReader::visibility(index_t row, index_t channel) const {
  std::complex<float> v;
  {
    const std::lock_guard<std::mutex> hold(library_lock());
    try {
      if (!holds_channel(channel))
        throw std::runtime_error(fmt::format("holds channels {} to {}, not {}", first_channel_,
                                             first_channel_ + file_channels_ - 1, channel));
      table_->get({table_row(row), 1, channel - first_channel_, 1}, &v);
    } catch (const std::runtime_error& e) {
      throw UsageError(path_, e.what());
    }
  }
  return {v.real(), -v.imag()};  // iotest's sign convention (ms_reader.hpp)
}

bool MsReader::read_chunk(const ChunkKey& key, cplx* out) const {
  if (!present_[static_cast<size_t>(key.row_chunk * channel_chunks() + key.freq_chunk)])
    return false;
  const Box box = box_of(key);
  cube_.resize(static_cast<size_t>(box.rows * box.channels));
  {
    const std::lock_guard<std::mutex> hold(library_lock());
    try {
      table_->get(box, cube_.data());
    } catch (const std::runtime_error& e) {
      throw UsageError(path_, e.what());
    }
  }
  std::fill(out, out + chunk_rows_ * chunk_channels_, cplx{});
  const std::complex<float>* in = cube_.data();
  for (index_t r = 0; r < box.rows; ++r)
    for (index_t c = 0; c < box.channels; ++c, ++in)
      out[r * chunk_channels_ + c] = cplx(in->real(), -in->imag());
  return true;
}

std::uint32_t MsReader::chunk_checksum(const ChunkKey& key, const cplx* chunk) const {
  if (!checksum_of_stored_) return Reader::chunk_checksum(key, chunk);
  // The chunk's cells inside the observation, back as DATA holds them.
  const Box box = box_of(key);
  std::vector<std::complex<float>> cells(static_cast<size_t>(box.rows * box.channels));
  for (index_t r = 0, o = 0; r < box.rows; ++r)
    for (index_t c = 0; c < box.channels; ++c, ++o) {
      const cplx v = chunk[r * chunk_channels_ + c];
      cells[static_cast<size_t>(o)] = {static_cast<float>(v.real()), static_cast<float>(-v.imag())};
    }
  return chunk_crc32(cells.data(), static_cast<index_t>(cells.size() * sizeof(cells[0])));
}

Box MsReader::box_of(const ChunkKey& key) const {
  return {first_row_[static_cast<size_t>(key.row_chunk)],
          std::min(chunk_rows_, nbls_ * ntimes_ - key.row_chunk * chunk_rows_),
          key.freq_chunk * chunk_channels_ - first_channel_,
          std::min(chunk_channels_, nfreqs_ - key.freq_chunk * chunk_channels_)};
}

std::vector<ChunkKey> MsReader::stored_chunks() const {
  std::vector<ChunkKey> keys;
  keys.reserve(order_.size());
  for (index_t i : order_) keys.push_back({i / channel_chunks(), i % channel_chunks()});
  return keys;
}

}  // namespace iotest::storage::ms
