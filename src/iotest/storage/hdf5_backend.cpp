// The HDF5 back-end: one UVH5 file (the format pyuvdata reads), header
// metadata from the observation, visibilities in Data/visdata as a compound
// of r and i, chunked one time-chunk x freq-chunk block of one baseline per
// HDF5 chunk. flags and nsamples are fill values (false, 1): they take no
// space until written.
#include <hdf5.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5_handles.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/uvh5_reader.hpp"

namespace iotest::storage {
namespace {

using hdf5::check;
using hdf5::check_id;
using hdf5::Id;

Id space(std::initializer_list<hsize_t> dims) {
  std::vector<hsize_t> d(dims);
  return {check_id(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), "dataspace"),
          H5Sclose};
}

void write_dataset(hid_t group, const char* name, hid_t type, const Id& shape, const void* data) {
  Id set(
      check_id(H5Dcreate2(group, name, type, shape, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name),
      H5Dclose);
  check(H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name);
}
void write_scalar(hid_t group, const char* name, double v) {
  write_dataset(group, name, H5T_NATIVE_DOUBLE, Id(H5Screate(H5S_SCALAR), H5Sclose), &v);
}
void write_scalar(hid_t group, const char* name, long long v) {
  write_dataset(group, name, H5T_NATIVE_LLONG, Id(H5Screate(H5S_SCALAR), H5Sclose), &v);
}
void write_string(hid_t group, const char* name, const std::string& s) {
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  check(H5Tset_size(type, std::max<size_t>(1, s.size())), name);
  write_dataset(group, name, type, Id(H5Screate(H5S_SCALAR), H5Sclose), s.c_str());
}
void write_strings(hid_t group, const char* name, const std::vector<std::string>& list) {
  size_t width = 1;
  for (const auto& s : list) width = std::max(width, s.size());
  std::vector<char> packed(list.size() * width, '\0');
  for (size_t i = 0; i < list.size(); ++i) list[i].copy(packed.data() + i * width, width);
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  check(H5Tset_size(type, width), name);
  check(H5Tset_strpad(type, H5T_STR_NULLPAD), name);
  write_dataset(group, name, type, space({list.size()}), packed.data());
}
template <typename T>
void write_vector(hid_t group, const char* name, hid_t type, const std::vector<T>& v,
                  hsize_t columns = 1) {
  const Id shape = columns == 1 ? space({v.size()}) : space({v.size() / columns, columns});
  write_dataset(group, name, type, shape, v.data());
}

// A per-baseline-time array (Nbls x Ntimes rows of `columns` values),
// filled and written `block` baselines at a time by fill(b0, b1, out).
template <typename T, class Fill>
void write_rows(hid_t group, const char* name, hid_t type, long long baselines, long long times,
                hsize_t columns, long long block, Fill&& fill) {
  const auto rows = static_cast<hsize_t>(baselines * times);
  const Id shape = columns == 1 ? space({rows}) : space({rows, columns});
  Id set(
      check_id(H5Dcreate2(group, name, type, shape, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name),
      H5Dclose);
  std::vector<T> buffer(static_cast<size_t>(std::min(block, baselines) * times) * columns);
  for (long long b0 = 0; b0 < baselines; b0 += block) {
    const long long b1 = std::min(baselines, b0 + block);
    fill(b0, b1, buffer.data());
    const hsize_t offset[2] = {static_cast<hsize_t>(b0 * times), 0};
    const hsize_t count[2] = {static_cast<hsize_t>((b1 - b0) * times), columns};
    const int rank = columns == 1 ? 1 : 2;
    Id file_space(H5Dget_space(set), H5Sclose);
    check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset, nullptr, count, nullptr), name);
    Id memory(check_id(H5Screate_simple(rank, count, nullptr), name), H5Sclose);
    check(H5Dwrite(set, type, memory, file_space, H5P_DEFAULT, buffer.data()), name);
  }
}

// A per-baseline-time array holding one value: its fill value, no chunk
// written, so it takes no space at any scale (reads give the value).
void write_constant_rows(hid_t group, const char* name, hid_t type, hsize_t rows,
                         const void* value) {
  Id props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const hsize_t chunk[1] = {std::max<hsize_t>(1, std::min<hsize_t>(rows, 1 << 20))};
  check(H5Pset_chunk(props, 1, chunk), name);
  check(H5Pset_fill_value(props, type, value), name);
  Id set(
      check_id(H5Dcreate2(group, name, type, space({rows}), H5P_DEFAULT, props, H5P_DEFAULT), name),
      H5Dclose);
}

// East-north-up offsets to Earth-centred ones at the array centre.
std::array<double, 3> enu_to_ecef_offset(const telescope::Enu& e, const telescope::Geodetic& c) {
  const double lon = c.lon_deg * std::numbers::pi / 180, lat = c.lat_deg * std::numbers::pi / 180;
  const double sl = std::sin(lon), cl = std::cos(lon), sp = std::sin(lat), cp = std::cos(lat);
  return {-sl * e.east - sp * cl * e.north + cp * cl * e.up,
          cl * e.east - sp * sl * e.north + cp * sl * e.up, cp * e.north + sp * e.up};
}

// The observation is placed on 2023-02-24 (JD 2460000.5): hour angle 0 at
// that moment, so the phase centre's right ascension is the local sidereal
// time then (mean sidereal time; pyuvdata recomputes LSTs precisely).
constexpr double kJd0 = 2460000.5;
constexpr double kSiderealPerSolar = 1.00273790935;
double local_sidereal_rad(double jd, double lon_deg) {
  const double gmst_deg = 280.46061837 + 360.98564736629 * (jd - 2451545.0);
  return std::fmod((gmst_deg + lon_deg) * std::numbers::pi / 180, 2 * std::numbers::pi);
}

// The serial HDF5 library is not thread-safe: writer threads of one process
// take turns (DESIGN.md section 5; --fork-writer gives each its own process).
std::mutex& library_lock() {
  static std::mutex lock;
  return lock;
}

class Hdf5Backend final : public Backend {
 public:
  void abort() noexcept override {
    const std::lock_guard<std::mutex> hold(library_lock());
    visdata_.reset();
    complex_.reset();
    file_.reset();
    if (!temp_.empty()) std::remove(temp_.c_str());
    temp_.clear();
  }

  ~Hdf5Backend() override { abort(); }
  std::string_view name() const override { return "hdf5"; }

 protected:
  void do_open(const std::string& path) override {
    const std::lock_guard<std::mutex> hold(library_lock());
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions, not prints
    path_ = path;
    temp_ = partial_path(path);
    // Chunks of whole pages start on a multiple of their size: each write
    // then covers whole pages (ext4 zeroes the rest of a page it starts)
    // and, at powers of two, whole page-cache folios. Metadata comes in
    // 1 MiB blocks, so little of it falls between chunks.
    Id access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    const auto chunk_bytes = static_cast<hsize_t>(layout().chunk_bytes());
    if (chunk_bytes % 4096 == 0)
      check(H5Pset_alignment(access, chunk_bytes, chunk_bytes), "chunk alignment");
    check(H5Pset_meta_block_size(access, 1 << 20), "metadata block size");
    file_ = Id(H5Fcreate(temp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access), H5Fclose);
    if (file_ < 0) {
      temp_.clear();
      throw UsageError("OUTPUT",
                       "cannot create '" + partial_path(path) + "' (is the folder writable?)");
    }
    write_header();
    create_data();
    chunk_.assign(static_cast<size_t>(layout().chunk_values()), cplx{});
  }

  // Whole chunks go straight to storage (H5Dwrite_chunk): no selection, no
  // type conversion (the compound {r, i} of doubles is std::complex's layout).
  void do_write_chunk(const ChunkKey& key, const cplx* data, bool accumulate) override {
    const std::lock_guard<std::mutex> hold(library_lock());
    const hsize_t offset[3] = {static_cast<hsize_t>(key.row_chunk * layout().time_chunk),
                               static_cast<hsize_t>(key.freq_chunk * layout().freq_chunk), 0};
    const size_t bytes = static_cast<size_t>(layout().chunk_bytes());
    const void* out = data;
    if (accumulate) {
      uint32_t filters = 0;
      if (H5Dread_chunk(visdata_, H5P_DEFAULT, offset, &filters, chunk_.data()) < 0)
        throw std::runtime_error("reading back a chunk of '" + temp_ + "' failed");
      for (size_t i = 0; i < chunk_.size(); ++i) chunk_[i] += data[i];
      out = chunk_.data();
    }
    if (H5Dwrite_chunk(visdata_, H5P_DEFAULT, 0, offset, bytes, out) < 0)
      throw std::runtime_error("writing '" + temp_ + "' failed (disk full?)");
    record_checksum(key, out);
  }

  void do_flush() override {
    const std::lock_guard<std::mutex> hold(library_lock());
    if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0)
      throw std::runtime_error("flushing '" + temp_ + "' failed (disk full?)");
    // H5Fflush hands the data to the kernel; fsync makes it durable, so
    // the write time is the device's, not the page cache's.
    void* handle = nullptr;
    if (H5Fget_vfd_handle(file_, H5P_DEFAULT, &handle) >= 0 && handle &&
        ::fsync(*static_cast<int*>(handle)) != 0)
      throw std::runtime_error("fsync of '" + temp_ + "' failed (disk full?)");
  }

  void do_close() override {
    write_iotest_group();
    do_flush();
    const std::lock_guard<std::mutex> hold(library_lock());
    visdata_.reset();
    complex_.reset();
    file_.reset();
    temp_.clear();  // complete: kept, under its temporary name, until published
  }

  void do_publish() override { publish(path_); }

 private:
  // What verify needs beyond UVH5, in /iotest (pyuvdata ignores the group):
  // a stonewalled file's written parts, one row (w_stack, subgrid,
  // row_chunk_begin, row_chunk_end) each, and every chunk's checksum, one
  // row (chunk, crc32) each.
  void write_iotest_group() {
    const std::lock_guard<std::mutex> hold(library_lock());
    Id group(check_id(H5Gcreate2(file_, "iotest", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "iotest"),
             H5Gclose);
    const auto rows = [&](const char* name, const std::vector<long long>& flat, hsize_t columns) {
      Id set(check_id(
                 H5Dcreate2(group, name, H5T_NATIVE_LLONG, space({flat.size() / columns, columns}),
                            H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 name),
             H5Dclose);
      if (!flat.empty())
        check(H5Dwrite(set, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data()), name);
    };
    if (layout().provenance && layout().provenance->stonewalled) {
      std::vector<long long> flat;
      for (const auto& p : written_parts())
        flat.insert(flat.end(), {p.w_stack, p.subgrid, p.row_chunk_begin, p.row_chunk_end});
      rows("written_parts", flat, 4);
    }
    std::vector<long long> flat;
    flat.reserve(2 * checksums().size());
    for (const auto& c : checksums()) flat.insert(flat.end(), {c.chunk, c.crc32});
    rows("chunk_crc32", flat, 2);
  }

  void write_header() {
    const auto& obs = *layout().observation;
    const auto& centre = obs.layout.centre;
    Id header(
        check_id(H5Gcreate2(file_, "Header", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "Header"),
        H5Gclose);
    write_string(header, "version", "1.2");
    write_string(header, "telescope_name", obs.vis_set);
    write_string(header, "instrument", obs.vis_set);
    const bool synthetic = layout().provenance && layout().provenance->synthetic;
    write_string(header, "history",
                 synthetic ? "Written by iotest --synthetic-vis (a storage benchmark: a pattern "
                             "naming each visibility, not a sky)."
                           : "Written by iotest (predicted visibilities of a point-source sky).");
    write_string(header, "vis_units", "uncalib");
    write_scalar(header, "latitude", centre.lat_deg);
    write_scalar(header, "longitude", centre.lon_deg);
    write_scalar(header, "altitude", centre.height_m);
    const auto nant = static_cast<long long>(obs.antenna_count());
    const auto nbl = static_cast<long long>(layout().baselines),
               nt = static_cast<long long>(layout().times),
               nf = static_cast<long long>(layout().channels);
    write_scalar(header, "Nants_telescope", nant);
    write_scalar(header, "Nants_data", nant);
    write_scalar(header, "Nbls", nbl);
    write_scalar(header, "Nblts", nbl * nt);
    write_scalar(header, "Nfreqs", nf);
    write_scalar(header, "Npols", 1LL);
    write_scalar(header, "Nspws", 1LL);
    write_scalar(header, "Ntimes", nt);
    std::vector<std::string> names;
    std::vector<long long> numbers;
    std::vector<double> positions;
    for (long long a = 0; a < nant; ++a) {
      names.push_back("ANT" + std::to_string(a));
      numbers.push_back(a);
      for (double x : enu_to_ecef_offset(obs.layout.antennas[static_cast<size_t>(a)], centre))
        positions.push_back(x);
    }
    write_strings(header, "antenna_names", names);
    write_vector(header, "antenna_numbers", H5T_NATIVE_LLONG, numbers);
    write_vector(header, "antenna_positions", H5T_NATIVE_DOUBLE, positions, 3);

    // Per baseline-time (UVH5's Nblts arrays, 130 M rows for SKA1-Low):
    // antennas, time and (u, v, w), computed and written a block of
    // baselines at a time, so a writer holds a block, not the observation.
    const auto baselines = obs.baselines();
    std::vector<telescope::Uvw> antenna_uvw;  // [time][antenna]: O(times x antennas)
    for (long long t = 0; t < nt; ++t) {
      const auto at = obs.antenna_uvw(t);
      antenna_uvw.insert(antenna_uvw.end(), at.begin(), at.end());
    }
    const auto rows = static_cast<hsize_t>(nbl * nt);
    const long long block = std::max(1LL, (1LL << 20) / nt);  // baselines per write
    const auto ant = [&](int which) {
      return [&, which](long long b0, long long b1, long long* out) {
        for (long long b = b0; b < b1; ++b)
          for (long long t = 0; t < nt; ++t) {
            const auto& pair = baselines[static_cast<size_t>(b)];
            *out++ = which == 1 ? pair.first : pair.second;
          }
      };
    };
    write_rows<long long>(header, "ant_1_array", H5T_NATIVE_LLONG, nbl, nt, 1, block, ant(1));
    write_rows<long long>(header, "ant_2_array", H5T_NATIVE_LLONG, nbl, nt, 1, block, ant(2));
    write_rows<double>(header, "time_array", H5T_NATIVE_DOUBLE, nbl, nt, 1, block,
                       [&](long long b0, long long b1, double* out) {
                         for (long long b = b0; b < b1; ++b)
                           for (long long t = 0; t < nt; ++t)
                             *out++ = kJd0 + obs.time.at(t) / kSiderealPerSolar / 86400;
                       });
    write_rows<double>(header, "uvw_array", H5T_NATIVE_DOUBLE, nbl, nt, 3, block,
                       [&](long long b0, long long b1, double* out) {
                         for (long long b = b0; b < b1; ++b)
                           for (long long t = 0; t < nt; ++t) {
                             const auto [a1, a2] = baselines[static_cast<size_t>(b)];
                             const auto& p1 = antenna_uvw[static_cast<size_t>(t * nant + a1)];
                             const auto& p2 = antenna_uvw[static_cast<size_t>(t * nant + a2)];
                             *out++ = p2.u - p1.u, *out++ = p2.v - p1.v, *out++ = p2.w - p1.w;
                           }
                       });
    const double dt_solar = obs.time.step() / kSiderealPerSolar;
    const double integration = dt_solar > 0 ? dt_solar : 1.0;
    write_constant_rows(header, "integration_time", H5T_NATIVE_DOUBLE, rows, &integration);
    std::vector<double> freq, width;
    for (long long k = 0; k < nf; ++k) {
      freq.push_back(obs.freq.at(k));
      width.push_back(obs.freq.step() > 0 ? obs.freq.step() : 1.0);
    }
    write_vector(header, "freq_array", H5T_NATIVE_DOUBLE, freq);
    write_vector(header, "channel_width", H5T_NATIVE_DOUBLE, width);
    write_vector(header, "spw_array", H5T_NATIVE_LLONG, std::vector<long long>{0});
    write_vector(header, "flex_spw_id_array", H5T_NATIVE_LLONG,
                 std::vector<long long>(static_cast<size_t>(nf), 0));
    write_vector(header, "polarization_array", H5T_NATIVE_LLONG, std::vector<long long>{1});
    write_string(header, "blt_order", "baseline, time");
    write_scalar(header, "blts_are_rectangular", 1LL);
    write_scalar(header, "time_axis_faster_than_bls", 1LL);
    // The phase centre: the declination asked for, at hour angle 0 at JD0,
    // in pyuvdata's catalog form. The apparent coordinates are given as the
    // catalog ones (iotest's (u, v, w) ignore precession and nutation);
    // without them pyuvdata would "fix" the phases of an old-style file.
    const double ra = local_sidereal_rad(kJd0, centre.lon_deg);
    const double dec = obs.dec_deg * std::numbers::pi / 180;
    {
      Id catalog(check_id(H5Gcreate2(header, "phase_center_catalog", H5P_DEFAULT, H5P_DEFAULT,
                                     H5P_DEFAULT),
                          "phase_center_catalog"),
                 H5Gclose);
      Id entry(check_id(H5Gcreate2(catalog, "0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "0"),
               H5Gclose);
      write_string(entry, "cat_name", "iotest");
      write_string(entry, "cat_type", "sidereal");
      write_scalar(entry, "cat_lon", ra);
      write_scalar(entry, "cat_lat", dec);
      write_string(entry, "cat_frame", "icrs");
      write_scalar(entry, "cat_epoch", 2000.0);
    }
    write_scalar(header, "Nphase", 1LL);
    if (layout().provenance) {
      const auto& pv = *layout().provenance;
      Id extra(check_id(H5Gcreate2(header, "extra_keywords", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                        "extra_keywords"),
               H5Gclose);
      write_string(extra, "iotest_rec_set", pv.rec_set);
      write_scalar(extra, "iotest_pixel_lm", pv.pixel_lm);
      write_scalar(extra, "iotest_source_count", static_cast<long long>(pv.source_count));
      write_scalar(extra, "iotest_seed", static_cast<long long>(pv.seed));
      if (pv.synthetic) write_scalar(extra, "iotest_synthetic_vis", 1LL);
      write_string(extra, "iotest_vis_set", pv.observation.vis_set);
      write_string(extra, "iotest_time", pv.observation.time.value_or(""));
      write_string(extra, "iotest_freq", pv.observation.freq.value_or(""));
      write_scalar(extra, "iotest_dec", pv.observation.dec_deg.value_or(obs.dec_deg));
      write_scalar(extra, "iotest_margin", static_cast<long long>(pv.margin));
      write_scalar(extra, "iotest_w_stack_step", pv.w_stack_step);
      if (pv.stonewalled) write_scalar(extra, "iotest_stonewalled", 1LL);
      write_scalar(extra, "iotest_nonce", static_cast<long long>(pv.nonce));
    }
    const long long centre_id = 0;
    const double frame_pa = 0.0;
    write_constant_rows(header, "phase_center_id_array", H5T_NATIVE_LLONG, rows, &centre_id);
    write_constant_rows(header, "phase_center_app_ra", H5T_NATIVE_DOUBLE, rows, &ra);
    write_constant_rows(header, "phase_center_app_dec", H5T_NATIVE_DOUBLE, rows, &dec);
    write_constant_rows(header, "phase_center_frame_pa", H5T_NATIVE_DOUBLE, rows, &frame_pa);
  }

  void create_data() {
    Id data(check_id(H5Gcreate2(file_, "Data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "Data"),
            H5Gclose);
    const hsize_t rows = static_cast<hsize_t>(layout().baselines * layout().times),
                  cols = static_cast<hsize_t>(layout().channels);
    const hsize_t chunk[3] = {static_cast<hsize_t>(layout().time_chunk),
                              static_cast<hsize_t>(layout().freq_chunk), 1};
    Id shape = space({rows, cols, 1});
    complex_ = Id(H5Tcreate(H5T_COMPOUND, sizeof(cplx)), H5Tclose);
    check(H5Tinsert(complex_, "r", 0, H5T_NATIVE_DOUBLE), "compound r");
    check(H5Tinsert(complex_, "i", sizeof(double), H5T_NATIVE_DOUBLE), "compound i");
    const auto create = [&](const char* name, hid_t type, const void* fill) {
      Id props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      check(H5Pset_chunk(props, 3, chunk), "chunking");
      if (fill) check(H5Pset_fill_value(props, type, fill), "fill value");
      return Id(
          check_id(H5Dcreate2(data, name, type, shape, H5P_DEFAULT, props, H5P_DEFAULT), name),
          H5Dclose);
    };
    visdata_ = create("visdata", complex_, nullptr);
    // flags: h5py's boolean (an int8 enum FALSE/TRUE); nsamples: float32.
    Id boolean(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
    signed char no = 0, yes = 1;
    check(H5Tenum_insert(boolean, "FALSE", &no), "enum");
    check(H5Tenum_insert(boolean, "TRUE", &yes), "enum");
    create("flags", boolean, &no);
    const float one = 1.0f;
    create("nsamples", H5T_NATIVE_FLOAT, &one);
  }

  std::string path_, temp_;
  Id file_, visdata_, complex_;
  std::vector<cplx> chunk_;  // read-back buffer for rewrites
};

}  // namespace

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

BackendSpec hdf5_spec() {
  BackendSpec s;
  s.name = "hdf5";
  s.summary = "one UVH5 file per writer (serial HDF5), readable by pyuvdata";
  s.make = [](const StorageOptions&) -> std::unique_ptr<Backend> {
    return std::make_unique<Hdf5Backend>();
  };
  s.recognises = &Uvh5Reader::recognises;
  s.open = [](const std::string& path, const StorageOptions&) -> std::unique_ptr<Reader> {
    return std::make_unique<Uvh5Reader>(path);
  };
  return s;
}

}  // namespace iotest::storage
