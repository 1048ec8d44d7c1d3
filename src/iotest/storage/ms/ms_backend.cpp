// The ms back-end: one MeasurementSet per writer (the format the SKA's
// visibility receive, CASA, WSClean and DP3 use), written through casacore.
//
// As the SDP's receive writes them, each MeasurementSet holds every row
// (baseline x time) of its own range of frequency chunks (FileSplit: the
// run routes every chunk to its file's writer). The main table's rows
// come a row chunk at a time, its time_chunk rows added when its first
// chunk comes (in the pipeline's order), so an iotest chunk is those rows
// x its channels of DATA, the single-polarisation (XX) complex float cube
// [1, channels, rows]. With TiledColumnStMan and its default tile shape
// [1, freq_chunk, time_chunk] an iotest chunk is one tile, written whole
// (docs/storage.md, "MeasurementSets").
//
// A MeasurementSet has no "absent" value: the tools read what FLAG says.
// So FLAG is tiled as DATA is: a chunk's values present are unflagged as
// they are written, and at completion the tiles of this file's rows that
// its writer never wrote are flagged, as are the rows that pad a short
// last row chunk to a whole tile.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/ms/ms_reader.hpp"
#include "iotest/storage/ms/ms_table.hpp"
#include "iotest/storage/output/file_store.hpp"
#include "iotest/storage/provenance_json.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/write_behind.hpp"
#include "iotest/telescope/catalog_frame.hpp"
#include "iotest/telescope/geodesy.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::storage {
namespace {

// How DATA and FLAG are stored (--ms.stman, --ms.tile).
struct MsOptions {
  bool tiled = true;        // TiledColumnStMan; else StandardStMan (rows whole)
  index_t tile_rows = 0;    // 0: the chunk's (time_chunk)
  index_t tile_channels = 0;  // 0: the chunk's (freq_chunk)
};

MsOptions parse_options(const StorageOptions& options) {
  MsOptions m;
  m.tiled = option_choice(options, "ms.stman", "tiled", {"tiled", "standard"}) == "tiled";
  const auto it = options.values.find("ms.tile");
  if (it == options.values.end() || it->second == "chunk") return m;
  if (!m.tiled) throw UsageError("--ms.tile", "applies to --ms.stman=tiled");
  const auto x = it->second.find('x');
  try {
    size_t used = 0;
    m.tile_rows = std::stoll(it->second.substr(0, x), &used);
    if (x == std::string::npos || used != x) throw std::invalid_argument("x");
    const std::string channels = it->second.substr(x + 1);
    m.tile_channels = std::stoll(channels, &used);
    if (used != channels.size()) throw std::invalid_argument("x");
  } catch (const std::exception&) {
    m.tile_rows = 0;
  }
  if (m.tile_rows < 1 || m.tile_channels < 1)
    throw UsageError("--ms.tile",
                     fmt::format("expected chunk or ROWSxCHANNELS (e.g. 64x16), got '{}'", it->second));
  return m;
}

// An antenna's Earth-centred position, as ANTENNA's POSITION holds it.
std::array<double, 3> itrf_of(const telescope::Observation& obs, index_t antenna) {
  const auto p = telescope::enu_to_ecef(obs.layout.antennas[static_cast<size_t>(antenna)],
                                        obs.layout.centre);
  return {p.x, p.y, p.z};
}

// fsync of every file under `folder` and of the folders themselves (their
// entries: a table's files are made as it is written).
void sync_folder(const std::string& folder) {
  namespace fs = std::filesystem;
  const auto sync = [](const fs::path& path, int flags) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int saved = errno;
      if (fd >= 0) ::close(fd);
      throw storage_failure(
          fmt::format("fsync of '{}' failed: {}", path.string(), std::strerror(saved)));
    }
    ::close(fd);
  };
  for (const auto& entry : fs::recursive_directory_iterator(folder))
    sync(entry.path(), entry.is_directory() ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  sync(folder, O_RDONLY | O_DIRECTORY);
}

class MsBackend final : public Backend {
 public:
  explicit MsBackend(MsOptions options) : options_(options) {}
  ~MsBackend() override { abort(); }
  std::string_view name() const override { return "ms"; }
  std::string durability() const override { return "fsync of every table file at close"; }
  // The chunk in single precision with its flags (0.56 of a chunk), and
  // the data manager's cache of two tiles of DATA and of FLAG (1.1).
  index_t held_chunks() const override { return 2; }
  index_t row_chunk_bytes() const override { return sizeof(index_t); }  // first_row_
  index_t stored_value_bytes() const override {
    return static_cast<index_t>(sizeof(std::complex<float>));
  }
  StoredForm stored_form() const override { return StoredForm::single_conjugated; }

  void abort() noexcept override {
    close_data_fd();
    try {
      const std::lock_guard<std::mutex> hold(ms::library_lock());
      if (table_) table_->discard();
      table_.reset();
    } catch (...) {
    }
    // What it wrote; the folder is its claim's, which removes it.
    if (!folder_.empty()) {
      std::error_code ignored;
      for (const auto& entry : std::filesystem::directory_iterator(folder_, ignored))
        std::filesystem::remove_all(entry.path(), ignored);
    }
    folder_.clear();
  }

 protected:
  void do_open(const std::string& partial) override {
    const auto& l = layout();
    const auto& obs = *l.observation;
    folder_ = partial;
    ms::MainTable spec;
    spec.channels = l.file_channels();
    spec.tiled = options_.tiled;
    spec.tile_rows = options_.tile_rows ? options_.tile_rows : l.time_chunk;
    spec.tile_channels = options_.tile_channels ? options_.tile_channels : l.freq_chunk;
    const double dt_solar = obs.time.step() / telescope::kSiderealPerSolar;
    spec.integration_s = dt_solar > 0 ? dt_solar : 1.0;
    spec.data_unit = l.provenance ? l.provenance->vis_units : "uncalib";
    const std::lock_guard<std::mutex> hold(ms::library_lock());
    try {
      table_ = std::make_unique<ms::TableWriter>(folder_, spec);
      write_subtables();
    } catch (const std::runtime_error& e) {
      throw storage_failure(e.what());
    }
    cube_.assign(static_cast<size_t>(l.chunk_values()), {});
    flags_.reset(new bool[static_cast<size_t>(l.chunk_values())]);
    first_row_.assign(static_cast<size_t>(l.row_chunks()), -1);
    order_.clear();
    antenna_uvw_.clear();
    baselines_ = obs.baselines();
    for (index_t t = 0; t < l.times; ++t) {
      const auto at = obs.antenna_uvw(t);
      antenna_uvw_.insert(antenna_uvw_.end(), at.begin(), at.end());
    }
  }

  void do_write_chunk(const ChunkKey& key, const cplx* data, bool accumulate,
                      const PresenceWord* present) override {
    const auto& l = layout();
    ms::Box box;
    try {
      {  // casacore's calls alone hold the library (the conversion needs none)
        const std::lock_guard<std::mutex> hold(ms::library_lock());
        box = box_of(key);
        if (accumulate) table_->get(box, cube_.data(), flags_.get());
      }
      // A whole chunk inside the observation (the common case) in one
      // pass that the compiler vectorises; a part, an accumulation or a
      // chunk clipped at the observation's edge cell by cell.
      const bool whole = !accumulate && !present && box.rows == l.time_chunk &&
                         box.channels == l.freq_chunk;
      if (whole)
        to_stored(data, box.rows * box.channels);
      else
        to_stored_cells(box, data, accumulate, present);
    } catch (const std::runtime_error& e) {
      throw storage_failure(e.what());
    }
    // The checksum is of the chunk's cells as the MS stores them: single
    // precision, conjugated, channels fastest (MsReader::chunk_checksum
    // gives the same from what it reads back). Half the bytes of iotest's
    // values, and no copy back to them.
    put_cells(key, box, cube_.data(),
              chunk_crc32(cube_.data(), box.rows * box.channels * stored_value_bytes()));
  }

  // A whole chunk the pusher made or converted (its cells, single and
  // conjugated, and their CRC-32): put as it is, no pass over it here.
  void do_write_stored(const ChunkKey& key, const void* cells) override {
    std::fill(flags_.get(), flags_.get() + layout().chunk_values(), false);
    ms::Box box;
    try {  // a new row chunk's rows are added here: a write
      const std::lock_guard<std::mutex> hold(ms::library_lock());
      box = box_of(key);
    } catch (const std::runtime_error& e) {
      throw storage_failure(e.what());
    }
    put_cells(key, box, static_cast<const std::complex<float>*>(cells), *given_crc32());
  }

  // `box`'s cells (chunk `key`) and flags_ into DATA and FLAG, and the
  // chunk recorded: its CRC-32 `crc`, its bytes behind.
  void put_cells(const ChunkKey& key, const ms::Box& box, const std::complex<float>* cells,
                 std::uint32_t crc) {
    try {
      const std::lock_guard<std::mutex> hold(ms::library_lock());
      table_->put(box, cells, flags_.get());
    } catch (const std::runtime_error& e) {
      throw storage_failure(e.what());
    }
    record_crc32(key, crc);
    write_behind(box.rows * box.channels * stored_value_bytes());
  }

  void do_flush() override {
    const std::lock_guard<std::mutex> hold(ms::library_lock());
    try {
      table_->flush();
    } catch (const std::runtime_error& e) {
      throw storage_failure(e.what());
    }
    // casacore's flush(sync) hands the tables to the kernel but syncs
    // none of their data files (strace: not table.f2_TSM0, DATA's), so
    // every file of the MS is synced here: the write time is the device's.
    sync_folder(folder_);
  }

  void do_close() override {
    {
      const std::lock_guard<std::mutex> hold(ms::library_lock());
      try {
        if (order_.empty()) keep_first_row();
        flag_unwritten();
        write_iotest_tables();
      } catch (const std::runtime_error& e) {
        throw storage_failure(e.what());
      }
    }
    do_flush();
    close_data_fd();
    const std::lock_guard<std::mutex> hold(ms::library_lock());
    table_->close();
    table_.reset();  // complete, under its temporary name until published
    folder_.clear();
  }

 private:
  // iotest's chunk is row-major [time_chunk][freq_chunk]; the MS's cube
  // runs channels fastest, then rows: the same order, clipped at the
  // observation's edges. Single precision and conjugated: the MS's
  // convention.
  void to_stored(const cplx* data, index_t n) {
    to_single_conjugated(data, n, cube_.data());
    std::fill(flags_.get(), flags_.get() + n, false);
  }
  // A part (the values `present`), an accumulation onto what the MS holds
  // (read into cube_ and flags_), or a chunk at the edge: absent cells
  // stay zero and flagged.
  void to_stored_cells(const ms::Box& box, const cplx* data, bool accumulate,
                       const PresenceWord* present) {
    const auto& l = layout();
    if (!accumulate) {
      std::fill(cube_.begin(), cube_.begin() + box.rows * box.channels, std::complex<float>());
      std::fill(flags_.get(), flags_.get() + box.rows * box.channels, true);
    }
    for (index_t r = 0, o = 0; r < box.rows; ++r)
      for (index_t c = 0; c < box.channels; ++c, ++o) {
        const index_t i = r * l.freq_chunk + c;
        if (present && !storage::present(present, i)) continue;
        cube_[static_cast<size_t>(o)] += std::complex<float>(static_cast<float>(data[i].real()),
                                                              static_cast<float>(-data[i].imag()));
        flags_[static_cast<size_t>(o)] = false;
      }
  }

  index_t rows_inside(index_t row_chunk) const {
    const auto& l = layout();
    return std::min(l.time_chunk, l.rows() - row_chunk * l.time_chunk);
  }
  index_t channels_inside(index_t freq_chunk) const {
    const auto& l = layout();
    return std::min(l.freq_chunk, l.channels - freq_chunk * l.freq_chunk);
  }

  // DATA's file streams to the device as it grows (tiles are appended in
  // the order row chunks come), as hdf5's and posix's do: without it the
  // whole MS sat dirty in the page cache until the fsync at close, and the
  // writer stalled on the kernel's dirty limits. Its own descriptor on the
  // data manager's file, opened once casacore has made it.
  void write_behind(index_t bytes) {
    if (data_fd_ < 0) {
      const std::lock_guard<std::mutex> hold(ms::library_lock());
      data_fd_ = ::open(table_->data_file().c_str(), O_RDONLY | O_CLOEXEC);
      if (data_fd_ < 0) return;
      write_behind_ = WriteBehind(data_fd_);
    }
    write_behind_.wrote(bytes);
  }
  void close_data_fd() {
    write_behind_ = WriteBehind();
    if (data_fd_ >= 0) ::close(data_fd_);
    data_fd_ = -1;
  }

  // A chunk's place in the main table: its row chunk's rows, added the
  // first time one of its chunks comes.
  ms::Box box_of(const ChunkKey& key) {
    const auto& l = layout();
    if (key.freq_chunk < l.first_freq_chunk || key.freq_chunk >= l.file_freq_chunk_end())
      throw std::logic_error(fmt::format("ms: frequency chunk {} is not this file's ({} to {})",
                                         key.freq_chunk, l.first_freq_chunk,
                                         l.file_freq_chunk_end() - 1));
    auto& first = first_row_[static_cast<size_t>(key.row_chunk)];
    if (first < 0) first = add_row_chunk(key.row_chunk);
    return {first, rows_inside(key.row_chunk), (key.freq_chunk - l.first_freq_chunk) * l.freq_chunk,
            channels_inside(key.freq_chunk)};
  }

  // A row chunk's time_chunk rows at the end of the table (the first uses
  // the row the table was made with): antennas, times and (u, v, w). A
  // short last row chunk is padded to a whole tile with copies of its last
  // row, flagged. Returns its first row.
  index_t add_row_chunk(index_t row_chunk) {
    const auto& l = layout();
    const auto& obs = *l.observation;
    const index_t first = order_.empty() ? 0 : table_->rows();
    table_->add_rows(order_.empty() ? l.time_chunk - 1 : l.time_chunk);
    order_.push_back(row_chunk);
    const index_t inside = rows_inside(row_chunk), nant = obs.antenna_count();
    std::vector<int> a1, a2;
    std::vector<double> time, uvw;
    for (index_t r = 0; r < l.time_chunk; ++r) {
      const index_t row = row_chunk * l.time_chunk + std::min(r, inside - 1);
      const index_t b = row / l.times, t = row % l.times;
      const auto [p, q] = baselines_[static_cast<size_t>(b)];
      a1.push_back(p), a2.push_back(q), time.push_back(telescope::mjd_seconds_utc(obs, t));
      // Antenna 1 minus antenna 2: the MS's convention (ms_reader.hpp).
      const auto& u1 = antenna_uvw_[static_cast<size_t>(t * nant + p)];
      const auto& u2 = antenna_uvw_[static_cast<size_t>(t * nant + q)];
      uvw.insert(uvw.end(), {u1.u - u2.u, u1.v - u2.v, u1.w - u2.w});
    }
    table_->put_rows({first, l.time_chunk, a1.data(), a2.data(), time.data(), uvw.data()});
    if (inside < l.time_chunk)
      table_->put_flags({first + inside, l.time_chunk - inside, 0, l.file_channels()}, true);
    return first;
  }

  // A writer that wrote nothing still leaves a valid MS: the row it was
  // made with, as the observation's first, flagged.
  void keep_first_row() {
    (void)box_of({0, layout().first_freq_chunk});
  }

  void write_subtables() {
    const auto& l = layout();
    const auto& obs = *l.observation;
    ms::Subtables s;
    for (index_t a = 0; a < obs.antenna_count(); ++a)
      s.antennas.push_back({"ANT" + std::to_string(a), obs.vis_set,
                            itrf_of(obs, a),
                            // The layouts give no dish size: VLA's (no imager here uses it).
                            25.0});
    for (index_t k = 0; k < l.file_channels(); ++k)
      s.channel_hz.push_back(obs.freq.at(l.file_first_channel() + k));
    s.channel_width_hz = obs.freq.step() > 0 ? obs.freq.step() : 1.0;
    s.bandwidth_hz = telescope::bandwidth_hz(obs) * static_cast<double>(l.file_channels()) /
                     static_cast<double>(l.channels);
    // The phase centre's ICRS position (FIELD says J2000, FK5, which lies
    // within 32 mas of ICRS). UVW have v toward ICRS north (iotest turns
    // (u, v) by the frame angle, Observation::antenna_uvw), J2000's to tens
    // of mas (docs/imaging.md, "Coordinates: the uvw model").
    const auto centre = telescope::phase_centre(obs).icrs;
    s.ra_rad = centre.ra_rad;
    s.dec_rad = centre.dec_rad;
    s.start_s = telescope::mjd_seconds_utc(obs, 0);
    s.end_s = telescope::mjd_seconds_utc(obs, l.times - 1);
    s.telescope = obs.vis_set;
    s.field_name = "iotest";
    s.log = l.provenance && l.provenance->synthetic
                ? "iotest --synthetic-vis: a pattern naming each visibility, not a sky"
                : "iotest: predicted visibilities of a point-source sky";
    table_->put_subtables(s);
    // What verify and read need beyond the MS: the axes and chunks, and
    // the provenance (JSON: every field exactly, as posix keeps it).
    nlohmann::json doc;
    doc["baselines"] = l.baselines;
    doc["times"] = l.times;
    doc["channels"] = l.channels;
    // This file's channels of the observation's, and the observation's
    // frequency axis (SPECTRAL_WINDOW lists only this file's).
    doc["first_channel"] = l.file_first_channel();
    doc["file_channels"] = l.file_channels();
    doc["freq_start_hz"] = obs.freq.at(0);
    doc["freq_step_hz"] = obs.freq.step();
    doc["time_chunk"] = l.time_chunk;
    doc["freq_chunk"] = l.freq_chunk;
    doc["checksum_of"] = kChecksumOfStoredCells;
    doc["provenance"] = l.provenance ? provenance_json(*l.provenance) : nlohmann::json(nullptr);
    table_->set_keyword(ms::kLayoutKeyword, doc.dump());
  }

  // Every tile of this file's rows and channels that its writer never
  // wrote (a stonewalled run), flagged (its DATA stays zero).
  void flag_unwritten() {
    const auto& l = layout();
    for (const index_t rc : order_)
      for (index_t fc = l.first_freq_chunk; fc < l.file_freq_chunk_end(); ++fc)
        if (!written({rc, fc})) table_->put_flags(box_of({rc, fc}), true);
  }

  // The chunks' checksums in write order, and a stonewalled run's written
  // parts: subtables, named by keywords of the main table.
  void write_iotest_tables() {
    std::vector<std::int64_t> sums;
    sums.reserve(2 * checksums().size());
    for (const auto& c : checksums()) sums.insert(sums.end(), {c.chunk, std::int64_t{c.crc32}});
    table_->put_int64_table(ms::kChunksTable, {"CHUNK", "CRC32"}, sums);
    std::vector<std::int64_t> rows;
    for (const index_t rc : order_) rows.insert(rows.end(), {rc, first_row_[static_cast<size_t>(rc)]});
    table_->put_int64_table(ms::kRowChunksTable, {"ROW_CHUNK", "FIRST_ROW"}, rows);
    if (!layout().provenance || !layout().provenance->stonewalled) return;
    std::vector<std::int64_t> parts;
    for (const auto& p : written_parts())
      parts.insert(parts.end(), {p.w_stack, p.subgrid, p.row_chunk_begin, p.row_chunk_end});
    table_->put_int64_table(ms::kPartsTable,
                            {"W_STACK", "SUBGRID", "ROW_CHUNK_BEGIN", "ROW_CHUNK_END"}, parts);
  }

  MsOptions options_;
  std::string folder_;  // the MS being written (its claim's partial folder)
  std::unique_ptr<ms::TableWriter> table_;
  std::vector<std::complex<float>> cube_;  // a chunk as the MS holds it
  std::unique_ptr<bool[]> flags_;          // and its flags
  int data_fd_ = -1;                       // DATA's file, for the write-behind
  WriteBehind write_behind_;
  std::vector<index_t> first_row_;         // per row chunk: its first row here, -1: none
  std::vector<index_t> order_;             // the row chunks here, in the table's order
  std::vector<telescope::Uvw> antenna_uvw_;  // [time][antenna]: O(times x antennas)
  std::vector<std::pair<int, int>> baselines_;
};
}  // namespace

BackendSpec ms_spec() {
  BackendSpec s;
  s.name = "ms";
  s.summary = "one MeasurementSet per writer (casacore), as CASA, WSClean and DP3 read";
  s.store = &file_store(/*folder=*/true);
  s.names = ".ms";
  s.named_by = [](const std::string& path) {
    return path.ends_with(".ms") || path.ends_with(".ms/");
  };
  s.files_by_frequency = true;
  s.options = {
      {"ms.stman",
       "the data manager of DATA and FLAG: tiled (TiledColumnStMan, a tile per chunk) or "
       "standard (StandardStMan, rows whole)",
       false, "tiled"},
      {"ms.tile", "TiledColumnStMan's tile: chunk (one iotest chunk a tile) or ROWSxCHANNELS",
       false, "chunk"},
  };
  s.make = [](const StorageOptions& options) -> std::unique_ptr<Backend> {
    return std::make_unique<MsBackend>(parse_options(options));
  };
  s.recognises = &ms::MsReader::recognises;
  s.open = [](const std::string& path, const StorageOptions&) -> std::unique_ptr<Reader> {
    return std::make_unique<ms::MsReader>(path);
  };
  return s;
}

}  // namespace iotest::storage
