// casacore behind a narrow door: the MeasurementSet tables the ms back-end
// (ms_backend.cpp, ms_reader.cpp) writes and reads. casacore 3.5's headers
// do not compile as C++20 (its allocators use members C++20 removed), so
// ms_table.cpp alone is built as C++17 and this header is valid in both:
// plain types only, casacore's errors as std::runtime_error.
#pragma once

#include <array>
#include <complex>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace iotest::storage::ms {

// casacore is not thread-safe across tables: the threads of one process
// that call it (writers of one streamer, readers) take turns.
std::mutex& library_lock();

// The main table: a row per baseline-time, DATA and FLAG cells of
// [1 correlation (XX), channels]. It starts with one row holding the
// constant columns, which the rows added after it repeat.
struct MainTable {
  std::int64_t channels = 0;
  bool tiled = true;  // TiledColumnStMan (else StandardStMan)
  std::int64_t tile_rows = 0, tile_channels = 0;
  double integration_s = 1;  // INTERVAL and EXPOSURE
  std::string data_unit;     // DATA's UNIT keyword ("Jy")
};

// Rows [row0, row0 + count): antennas, time (MJD seconds, UTC) and uvw
// (metres, 3 per row), as the MS wants them.
struct RowBlock {
  std::int64_t row0 = 0, count = 0;
  const int* antenna1 = nullptr;
  const int* antenna2 = nullptr;
  const double* time = nullptr;
  const double* uvw = nullptr;
};

// The subtables' contents.
struct Antenna {
  std::string name, station;
  std::array<double, 3> itrf{};  // metres, Earth-centred
  double dish_diameter_m = 25;
};
struct Subtables {
  std::vector<Antenna> antennas;
  std::vector<double> channel_hz;  // centres
  double channel_width_hz = 1, bandwidth_hz = 1;
  double ra_rad = 0, dec_rad = 0;  // the phase centre (ICRS, stated as J2000)
  double start_s = 0, end_s = 0;   // MJD seconds
  std::string telescope, field_name, log;
};

// A block of the main table's DATA and FLAG: rows [row0, +rows) x channels
// [channel0, +channels), channel fastest (casacore's order).
struct Box {
  std::int64_t row0 = 0, rows = 0, channel0 = 0, channels = 0;
};

class TableWriter {
 public:
  // Creates the MS at `path` (a folder, empty or absent), its first row
  // with the constant columns, and the default subtables.
  TableWriter(const std::string& path, const MainTable& spec);
  ~TableWriter();
  TableWriter(const TableWriter&) = delete;
  TableWriter& operator=(const TableWriter&) = delete;

  std::int64_t rows() const;
  void add_rows(std::int64_t count);
  void put_rows(const RowBlock& block);
  void put_subtables(const Subtables& s);
  void put(const Box& box, const std::complex<float>* data, const bool* flags);
  void get(const Box& box, std::complex<float>* data, bool* flags) const;
  void put_flags(const Box& box, bool value);
  void set_keyword(const std::string& name, const std::string& value);
  // A subtable of Int64 columns, named by a keyword of the main table;
  // `values` row-major (rows x columns.size()).
  void put_int64_table(const std::string& name, const std::vector<std::string>& columns,
                       const std::vector<std::int64_t>& values);
  // The file DATA's values go to (its data manager's: TiledColumnStMan's
  // hypercube, or StandardStMan's file), which may not exist until the
  // first tile leaves casacore's cache.
  std::string data_file() const;
  void flush();  // to the kernel: casacore syncs none of its data files
  void close();  // flushed by casacore, not synced
  // After a failure: the tables dropped without casacore flushing or
  // deleting them (either fails in casacore's destructors, as on a full
  // disk or a folder being removed, and ends the process); the caller
  // removes the files.
  void discard() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TableReader {
 public:
  // std::runtime_error with casacore's reason when `path` is no table.
  explicit TableReader(const std::string& path);
  ~TableReader();
  TableReader(const TableReader&) = delete;
  TableReader& operator=(const TableReader&) = delete;

  std::int64_t rows() const;
  bool has_column(const std::string& name) const;
  bool has_keyword(const std::string& name) const;
  std::string keyword(const std::string& name) const;
  std::int64_t spectral_windows() const;
  std::vector<double> channel_hz() const;  // of spectral window 0
  // A subtable named by a keyword: its columns' values row-major; an
  // empty name in `missing` if all columns are there, else the first
  // missing one (and no values).
  std::vector<std::int64_t> int64_table(const std::string& name,
                                     const std::vector<std::string>& columns,
                                     std::string& missing) const;
  std::array<double, 3> uvw(std::int64_t row) const;
  void get(const Box& box, std::complex<float>* data) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace iotest::storage::ms
