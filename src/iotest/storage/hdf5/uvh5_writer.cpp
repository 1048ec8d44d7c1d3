// The UVH5 layout (the format pyuvdata reads) as iotest writes it: the
// header from the observation and the Data group. Shared by the back-ends
// that write UVH5: `hdf5` (a file per writer) and `phdf5` (one shared file,
// its header written by one rank).
#include "iotest/storage/hdf5/uvh5_writer.hpp"

#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "iotest/telescope/catalog_frame.hpp"

namespace iotest::storage::uvh5 {

using hdf5::check;
using hdf5::check_id;
using hdf5::Id;

namespace {

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

}  // namespace

std::mutex& library_lock() {
  static std::mutex lock;
  return lock;
}

Id space(std::initializer_list<hsize_t> dims) {
  std::vector<hsize_t> d(dims);
  return {check_id(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), "dataspace"),
          H5Sclose};
}

Id complex_type() {
  Id complex(check_id(H5Tcreate(H5T_COMPOUND, sizeof(cplx)), "compound"), H5Tclose);
  check(H5Tinsert(complex, "r", 0, H5T_NATIVE_DOUBLE), "compound r");
  check(H5Tinsert(complex, "i", sizeof(double), H5T_NATIVE_DOUBLE), "compound i");
  return complex;
}

void write_header(hid_t file, const VisibilityLayout& layout) {
  const auto& obs = *layout.observation;
  const auto& centre = obs.layout.centre;
  Id header(check_id(H5Gcreate2(file, "Header", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "Header"),
            H5Gclose);
  write_string(header, "version", "1.2");
  write_string(header, "telescope_name", obs.vis_set);
  write_string(header, "instrument", obs.vis_set);
  const bool synthetic = layout.provenance && layout.provenance->synthetic;
  write_string(header, "history",
               synthetic ? "Written by iotest --synthetic-vis (a storage benchmark: a pattern "
                           "naming each visibility, not a sky)."
                         : "Written by iotest (predicted visibilities of a point-source sky).");
  // Jy for a sky's visibilities; a synthetic pattern (or values of no
  // known sky) has no unit.
  write_string(header, "vis_units",
               layout.provenance ? layout.provenance->vis_units : std::string("uncalib"));
  write_scalar(header, "latitude", centre.lat_deg);
  write_scalar(header, "longitude", centre.lon_deg);
  write_scalar(header, "altitude", centre.height_m);
  const auto nant = static_cast<long long>(obs.antenna_count());
  const auto nbl = static_cast<long long>(layout.baselines),
             nt = static_cast<long long>(layout.times),
             nf = static_cast<long long>(layout.channels);
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
                           *out++ = telescope::kStartJd +
                                    obs.time.at(t) / telescope::kSiderealPerSolar / 86400;
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
  const double dt_solar = obs.time.step() / telescope::kSiderealPerSolar;
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
  // One linear polarisation, XX (AIPS code -5), for an unpolarised sky
  // with CASA's and WSClean's convention I = (XX + YY) / 2: a source of S Jy
  // gives XX = S. Not pseudo-Stokes I (code 1), which the MeasurementSet
  // has no correlation type for: pyuvdata's write_ms refuses it.
  write_vector(header, "polarization_array", H5T_NATIVE_LLONG, std::vector<long long>{-5});
  // The convention is a property of calibrated data: pyuvdata refuses it
  // beside "uncalib" (a synthetic pattern).
  if (layout.provenance && layout.provenance->vis_units == kJanskyUnits)
    write_string(header, "pol_convention", "avg");
  write_string(header, "blt_order", "baseline, time");
  write_scalar(header, "blts_are_rectangular", 1LL);
  write_scalar(header, "time_axis_faster_than_bls", 1LL);
  // The phase centre: the declination asked for, at hour angle 0 at JD0,
  // in pyuvdata's catalog form. Its apparent coordinates are those of the
  // (u, v, w): right ascension the local apparent sidereal time at JD0,
  // so pyuvdata's hour angles (apparent sidereal time minus it) are
  // iotest's. The catalog entry is the same direction in ICRS. Without
  // apparent coordinates pyuvdata would "fix" the phases of an old-style
  // file. frame_pa is pyuvdata's turn of (u, v) from the apparent frame's
  // north to the catalog's (ICRS): iotest's (u, v, w) are turned by it
  // (Observation::antenna_uvw), v toward ICRS north, so pyuvdata's check()
  // recomputes them (0.11 degrees at vlaa dec 34): docs/imaging.md,
  // "Coordinates: the uvw model".
  const auto phase_centre = telescope::phase_centre(obs);
  const double ra = phase_centre.apparent.ra_rad, dec = phase_centre.apparent.dec_rad;
  {
    Id catalog(
        check_id(H5Gcreate2(header, "phase_center_catalog", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 "phase_center_catalog"),
        H5Gclose);
    Id entry(check_id(H5Gcreate2(catalog, "0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "0"),
             H5Gclose);
    write_string(entry, "cat_name", "iotest");
    write_string(entry, "cat_type", "sidereal");
    write_scalar(entry, "cat_lon", phase_centre.icrs.ra_rad);
    write_scalar(entry, "cat_lat", phase_centre.icrs.dec_rad);
    write_string(entry, "cat_frame", "icrs");
    write_scalar(entry, "cat_epoch", 2000.0);
    // As pyuvdata writes its own: its phase(lookup_name=True) needs it.
    write_string(entry, "info_source", "user");
  }
  write_scalar(header, "Nphase", 1LL);
  if (layout.provenance) {
    const auto& pv = *layout.provenance;
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
    write_string(extra, "iotest_command_line", pv.command_line);
    write_string(extra, "iotest_started", pv.started);
    write_string(extra, "iotest_host", pv.host);
  }
  const long long centre_id = 0;
  const double frame_pa = phase_centre.frame_pa_rad;
  write_constant_rows(header, "phase_center_id_array", H5T_NATIVE_LLONG, rows, &centre_id);
  write_constant_rows(header, "phase_center_app_ra", H5T_NATIVE_DOUBLE, rows, &ra);
  write_constant_rows(header, "phase_center_app_dec", H5T_NATIVE_DOUBLE, rows, &dec);
  write_constant_rows(header, "phase_center_frame_pa", H5T_NATIVE_DOUBLE, rows, &frame_pa);
}

Id create_data(hid_t file, const VisibilityLayout& layout, const VisdataCreation& how) {
  Id data(check_id(H5Gcreate2(file, "Data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "Data"),
          H5Gclose);
  const hsize_t rows = static_cast<hsize_t>(layout.baselines * layout.times),
                cols = static_cast<hsize_t>(layout.channels);
  const hsize_t chunk[3] = {static_cast<hsize_t>(layout.time_chunk),
                            static_cast<hsize_t>(layout.freq_chunk), 1};
  Id shape = space({rows, cols, 1});
  const Id complex = complex_type();
  const auto create = [&](const char* name, hid_t type, const void* fill, bool visdata) {
    Id props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    check(H5Pset_chunk(props, 3, chunk), "chunking");
    if (fill) check(H5Pset_fill_value(props, type, fill), "fill value");
    if (visdata && how.never_fill) check(H5Pset_fill_time(props, H5D_FILL_TIME_NEVER), "fill time");
    if (visdata && how.allocate_early)
      check(H5Pset_alloc_time(props, H5D_ALLOC_TIME_EARLY), "allocation time");
    return Id(check_id(H5Dcreate2(data, name, type, shape, H5P_DEFAULT, props, H5P_DEFAULT), name),
              H5Dclose);
  };
  Id visdata = create("visdata", complex, nullptr, true);
  // flags: h5py's boolean (an int8 enum FALSE/TRUE); nsamples: float32.
  Id boolean(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
  signed char no = 0, yes = 1;
  check(H5Tenum_insert(boolean, "FALSE", &no), "enum");
  check(H5Tenum_insert(boolean, "TRUE", &yes), "enum");
  create("flags", boolean, &no, false);
  const float one = 1.0f;
  create("nsamples", H5T_NATIVE_FLOAT, &one, false);
  return visdata;
}

}  // namespace iotest::storage::uvh5
