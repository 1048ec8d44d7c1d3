// The ms back-end: one MeasurementSet per writer (the format the SKA's
// visibility receive, CASA, WSClean and DP3 use), written through casacore.
//
// The main table has a row per baseline-time in iotest's order (baseline-
// major, time fastest, as UVH5), so an iotest chunk is rows
// [row_chunk * time_chunk, +time_chunk) x channels [freq_chunk *
// freq_chunk_size, +freq_chunk_size) of DATA, the single-polarisation
// (XX) complex float cube [1, channels, rows]. With TiledColumnStMan and
// its default tile shape [1, freq_chunk, time_chunk] an iotest chunk is
// one tile, written whole, in the pipeline's order (docs/storage.md,
// "MeasurementSets").
//
// A MeasurementSet has no "absent" value: the tools read what FLAG says.
// So FLAG is tiled as DATA is: a chunk's values present are unflagged as
// they are written, and at completion every tile this writer never wrote
// is flagged (one bit per visibility of the observation per file: 1/64
// of the data's size).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/ms_reader.hpp"
#include "iotest/storage/ms_table.hpp"
#include "iotest/storage/provenance_json.hpp"
#include "iotest/storage/registry.hpp"
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

// Earth-centred position of an antenna: the array centre's plus its offset.
std::array<double, 3> antenna_itrf(const telescope::Enu& e, const telescope::Geodetic& c) {
  const auto centre = telescope::geodetic_to_ecef(c);
  const double lon = c.lon_deg * std::numbers::pi / 180, lat = c.lat_deg * std::numbers::pi / 180;
  const double sl = std::sin(lon), cl = std::cos(lon), sp = std::sin(lat), cp = std::cos(lat);
  return {centre.x - sl * e.east - sp * cl * e.north + cp * cl * e.up,
          centre.y + cl * e.east - sp * sl * e.north + cp * sl * e.up,
          centre.z + cp * e.north + sp * e.up};
}

double mjd_seconds(double jd) { return (jd - 2400000.5) * 86400; }

// The MJD seconds (UTC) of time step t, as the MS's TIME says it.
double time_s(const telescope::Observation& obs, index_t t) {
  return mjd_seconds(telescope::kStartJd + obs.time.at(t) / telescope::kSiderealPerSolar / 86400);
}

class MsBackend final : public Backend {
 public:
  explicit MsBackend(MsOptions options) : options_(options) {}
  ~MsBackend() override { abort(); }
  std::string_view name() const override { return "ms"; }
  std::string durability() const override { return "fsync at close (casacore Table::flush)"; }
  // The chunk in single precision with its flags, and the data manager's
  // cache of two tiles of DATA and of FLAG.
  index_t held_chunks() const override { return 3; }
  bool rounds_values() const override { return true; }

  void abort() noexcept override {
    try {
      const std::lock_guard<std::mutex> hold(ms::library_lock());
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
  void do_open(const std::string& path) override {
    const auto& l = layout();
    const auto& obs = *l.observation;
    folder_ = partial_of(path);
    ms::MainTable spec;
    spec.rows = l.rows();
    spec.channels = l.channels;
    spec.tiled = options_.tiled;
    spec.tile_rows = options_.tile_rows ? options_.tile_rows : l.time_chunk;
    spec.tile_channels = options_.tile_channels ? options_.tile_channels : l.freq_chunk;
    const double dt_solar = obs.time.step() / telescope::kSiderealPerSolar;
    spec.integration_s = dt_solar > 0 ? dt_solar : 1.0;
    spec.data_unit = l.provenance ? l.provenance->vis_units : "uncalib";
    const std::lock_guard<std::mutex> hold(ms::library_lock());
    try {
      table_ = std::make_unique<ms::TableWriter>(folder_, spec);
      write_rows();
      write_subtables();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("'{}': {} (disk full?)", folder_, e.what()));
    }
    cube_.assign(static_cast<size_t>(l.chunk_values()), {});
    flags_.reset(new bool[static_cast<size_t>(l.chunk_values())]);
    values_.assign(static_cast<size_t>(l.chunk_values()), cplx{});
    written_.assign(static_cast<size_t>(l.chunk_count()), false);
  }

  void do_write_chunk(const ChunkKey& key, const cplx* data, bool accumulate,
                      const PresenceWord* present) override {
    const auto& l = layout();
    const ms::Box box = box_of(key);
    const std::lock_guard<std::mutex> hold(ms::library_lock());
    try {
      if (accumulate) {
        table_->get(box, cube_.data(), flags_.get());
      } else {
        std::fill(cube_.begin(), cube_.end(), std::complex<float>());
        std::fill(flags_.get(), flags_.get() + box.rows * box.channels, true);
      }
      // iotest's chunk is row-major [time_chunk][freq_chunk]; the MS's
      // cube runs channels fastest, then rows: the same order, clipped at
      // the observation's edges. Conjugated: the MS's convention.
      for (index_t r = 0, o = 0; r < box.rows; ++r)
        for (index_t c = 0; c < box.channels; ++c, ++o) {
          const index_t i = r * l.freq_chunk + c;
          if (present && !storage::present(present, i)) continue;
          cube_[static_cast<size_t>(o)] += std::complex<float>(static_cast<float>(data[i].real()),
                                                                static_cast<float>(-data[i].imag()));
          flags_[static_cast<size_t>(o)] = false;
        }
      table_->put(box, cube_.data(), flags_.get());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("'{}': {} (disk full?)", folder_, e.what()));
    }
    // The checksum is of the values as readers give them back: rounded to
    // single precision, in iotest's convention, zero where absent.
    std::fill(values_.begin(), values_.end(), cplx{});
    for (index_t r = 0, o = 0; r < box.rows; ++r)
      for (index_t c = 0; c < box.channels; ++c, ++o) {
        const auto v = cube_[static_cast<size_t>(o)];
        values_[static_cast<size_t>(r * l.freq_chunk + c)] = cplx(v.real(), -v.imag());
      }
    record_checksum(key, values_.data());
    written_[static_cast<size_t>(key.row_chunk * l.freq_chunks() + key.freq_chunk)] = true;
  }

  void do_flush() override {
    const std::lock_guard<std::mutex> hold(ms::library_lock());
    try {
      table_->flush();  // fsync: the write time is the device's
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("'{}': {} (disk full?)", folder_, e.what()));
    }
  }

  void do_close() override {
    {
      const std::lock_guard<std::mutex> hold(ms::library_lock());
      try {
        flag_unwritten();
        write_iotest_tables();
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(fmt::format("'{}': {} (disk full?)", folder_, e.what()));
      }
    }
    do_flush();
    const std::lock_guard<std::mutex> hold(ms::library_lock());
    table_->close();
    table_.reset();  // complete, under its temporary name until published
    folder_.clear();
  }

 private:
  // A chunk's place in the main table, clipped at the observation's edges.
  ms::Box box_of(const ChunkKey& key) const {
    const auto& l = layout();
    ms::Box b;
    b.row0 = key.row_chunk * l.time_chunk;
    b.rows = std::min(l.time_chunk, l.rows() - b.row0);
    b.channel0 = key.freq_chunk * l.freq_chunk;
    b.channels = std::min(l.freq_chunk, l.channels - b.channel0);
    return b;
  }

  // Antennas, times and (u, v, w) a block of baselines at a time, so a
  // writer holds a block, not the observation.
  void write_rows() {
    const auto& l = layout();
    const auto& obs = *l.observation;
    const index_t nt = l.times, nant = obs.antenna_count();
    const auto baselines = obs.baselines();
    std::vector<telescope::Uvw> antenna_uvw;  // [time][antenna]: O(times x antennas)
    std::vector<double> times;
    for (index_t t = 0; t < nt; ++t) {
      const auto at = obs.antenna_uvw(t);
      antenna_uvw.insert(antenna_uvw.end(), at.begin(), at.end());
      times.push_back(time_s(obs, t));
    }
    const index_t block = std::max<index_t>(1, (index_t{1} << 18) / nt);  // baselines per put
    std::vector<int> a1, a2;
    std::vector<double> time, uvw;
    for (index_t b0 = 0; b0 < l.baselines; b0 += block) {
      const index_t b1 = std::min(l.baselines, b0 + block);
      a1.clear(), a2.clear(), time.clear(), uvw.clear();
      for (index_t b = b0; b < b1; ++b)
        for (index_t t = 0; t < nt; ++t) {
          const auto [p, q] = baselines[static_cast<size_t>(b)];
          a1.push_back(p), a2.push_back(q), time.push_back(times[static_cast<size_t>(t)]);
          // Antenna 1 minus antenna 2: the MS's convention (ms_reader.hpp).
          const auto& u1 = antenna_uvw[static_cast<size_t>(t * nant + p)];
          const auto& u2 = antenna_uvw[static_cast<size_t>(t * nant + q)];
          uvw.insert(uvw.end(), {u1.u - u2.u, u1.v - u2.v, u1.w - u2.w});
        }
      table_->put_rows({b0 * nt, (b1 - b0) * nt, a1.data(), a2.data(), time.data(), uvw.data()});
    }
  }

  void write_subtables() {
    const auto& l = layout();
    const auto& obs = *l.observation;
    ms::Subtables s;
    for (index_t a = 0; a < obs.antenna_count(); ++a)
      s.antennas.push_back({"ANT" + std::to_string(a), obs.vis_set,
                            antenna_itrf(obs.layout.antennas[static_cast<size_t>(a)],
                                         obs.layout.centre),
                            // The layouts give no dish size: VLA's (no imager here uses it).
                            25.0});
    for (index_t k = 0; k < l.channels; ++k) s.channel_hz.push_back(obs.freq.at(k));
    s.channel_width_hz = obs.freq.step() > 0 ? obs.freq.step() : 1.0;
    s.bandwidth_hz = telescope::bandwidth_hz(obs);
    s.ra_rad = telescope::phase_centre_ra_rad(obs);
    s.dec_rad = obs.dec_deg * std::numbers::pi / 180;
    s.start_s = time_s(obs, 0);
    s.end_s = time_s(obs, l.times - 1);
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
    doc["time_chunk"] = l.time_chunk;
    doc["freq_chunk"] = l.freq_chunk;
    doc["provenance"] = l.provenance ? provenance_json(*l.provenance) : nlohmann::json(nullptr);
    table_->set_keyword(ms::kLayoutKeyword, doc.dump());
  }

  // Every tile this writer never wrote, flagged (its DATA stays unwritten).
  void flag_unwritten() {
    const auto& l = layout();
    for (index_t i = 0; i < l.chunk_count(); ++i)
      if (!written_[static_cast<size_t>(i)])
        table_->put_flags(box_of({i / l.freq_chunks(), i % l.freq_chunks()}), true);
  }

  // The chunks' checksums in write order, and a stonewalled run's written
  // parts: subtables, named by keywords of the main table.
  void write_iotest_tables() {
    std::vector<std::int64_t> sums;
    sums.reserve(2 * checksums().size());
    for (const auto& c : checksums()) sums.insert(sums.end(), {c.chunk, std::int64_t{c.crc32}});
    table_->put_int64_table(ms::kChunksTable, {"CHUNK", "CRC32"}, sums);
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
  std::vector<cplx> values_;               // as readers give it back, for its checksum
  std::vector<bool> written_;              // per chunk
};
}  // namespace

BackendSpec ms_spec() {
  BackendSpec s;
  s.name = "ms";
  s.summary = "one MeasurementSet per writer (casacore), as CASA, WSClean and DP3 read";
  s.folder = true;
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
