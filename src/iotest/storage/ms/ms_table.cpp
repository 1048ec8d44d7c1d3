// casacore's side of the ms back-end, built as C++17 (ms_table.hpp says why).
// How the main table is stored:
// - columns constant over the observation (ARRAY_ID ... WEIGHT, SIGMA) in
//   IncrementalStMan, which stores a value once and repeats it in the rows
//   added after it: no space per row;
// - TIME, ANTENNA1/2, UVW in StandardStMan;
// - DATA and FLAG in TiledColumnStMan (a tile per iotest chunk by default;
//   its cache held to two tiles) or StandardStMan (--ms.stman=standard).
#include "iotest/storage/ms/ms_table.hpp"

#include <casacore/casa/Arrays/Array.h>
#include <casacore/casa/Arrays/Matrix.h>
#include <casacore/casa/Arrays/Vector.h>
#include <casacore/casa/Exceptions/Error.h>
#include <casacore/measures/Measures/MDirection.h>
#include <casacore/measures/Measures/MFrequency.h>
#include <casacore/measures/Measures/Muvw.h>
#include <casacore/measures/Measures/Stokes.h>
#include <casacore/ms/MeasurementSets/MSColumns.h>
#include <casacore/ms/MeasurementSets/MeasurementSet.h>
#include <casacore/tables/DataMan/DataManager.h>
#include <casacore/tables/DataMan/IncrementalStMan.h>
#include <casacore/tables/DataMan/StandardStMan.h>
#include <casacore/tables/DataMan/TiledColumnStMan.h>
#include <casacore/tables/Tables/ArrayColumn.h>
#include <casacore/tables/Tables/ScaColDesc.h>
#include <casacore/tables/Tables/ScalarColumn.h>
#include <casacore/tables/Tables/SetupNewTab.h>
#include <casacore/tables/Tables/TableDesc.h>
#include <casacore/tables/Tables/TableLock.h>

#include <cmath>
#include <stdexcept>

namespace iotest::storage::ms {

namespace cc = casacore;
using cc::IPosition;
using cc::Slicer;

std::mutex& library_lock() {
  static std::mutex lock;
  return lock;
}

namespace {

constexpr double kPi = 3.14159265358979323846;

// casacore's exceptions as the standard library's, with its reason.
template <class F>
auto guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const cc::AipsError& e) {
    throw std::runtime_error(std::string(what) + " failed: " + e.what());
  }
}

Slicer rows_of(const Box& b) { return Slicer(IPosition(1, b.row0), IPosition(1, b.rows)); }
Slicer channels_of(const Box& b) {
  return Slicer(IPosition(2, 0, b.channel0), IPosition(2, 1, b.channels));
}
IPosition cube_of(const Box& b) { return IPosition(3, 1, b.channels, b.rows); }

const cc::String& column(cc::MS::PredefinedColumns c) { return cc::MS::columnName(c); }

}  // namespace

struct TableWriter::Impl {
  std::unique_ptr<cc::MeasurementSet> ms;
  std::unique_ptr<cc::ArrayColumn<cc::Complex>> data;
  std::unique_ptr<cc::ArrayColumn<bool>> flag;
};

TableWriter::TableWriter(const std::string& path, const MainTable& spec)
    : impl_(std::make_unique<Impl>()) {
  guarded("creating the MeasurementSet", [&] {
    const IPosition cell(2, 1, spec.channels);
    cc::TableDesc td = cc::MS::requiredTableDesc();
    cc::MS::addColumnToDesc(td, cc::MS::DATA, cell, cc::ColumnDesc::FixedShape);
    td.rwColumnDesc(column(cc::MS::FLAG)).setShape(cell);
    td.rwColumnDesc(column(cc::MS::WEIGHT)).setShape(IPosition(1, 1));
    td.rwColumnDesc(column(cc::MS::SIGMA)).setShape(IPosition(1, 1));
    cc::SetupNewTable setup(path, td, cc::Table::New);
    cc::IncrementalStMan constants("ConstantsISM");
    for (auto c : {cc::MS::ARRAY_ID, cc::MS::DATA_DESC_ID, cc::MS::EXPOSURE, cc::MS::FEED1,
                   cc::MS::FEED2, cc::MS::FIELD_ID, cc::MS::FLAG_ROW, cc::MS::INTERVAL,
                   cc::MS::OBSERVATION_ID, cc::MS::PROCESSOR_ID, cc::MS::SCAN_NUMBER,
                   cc::MS::STATE_ID, cc::MS::WEIGHT, cc::MS::SIGMA})
      setup.bindColumn(column(c), constants);
    cc::StandardStMan per_row("RowsSSM");
    for (auto c : {cc::MS::TIME, cc::MS::TIME_CENTROID, cc::MS::ANTENNA1, cc::MS::ANTENNA2,
                   cc::MS::UVW, cc::MS::FLAG_CATEGORY})
      setup.bindColumn(column(c), per_row);
    const IPosition tile(3, 1, spec.tile_channels, spec.tile_rows);
    // Two tiles cached per column: the one written and the next.
    const auto cache =
        static_cast<cc::uInt64>(2 * spec.tile_rows * spec.tile_channels * sizeof(cc::Complex));
    cc::TiledColumnStMan tiled_data("TiledDATA", tile, cache), tiled_flag("TiledFLAG", tile, cache);
    cc::StandardStMan standard("VisibilitiesSSM");
    setup.bindColumn(column(cc::MS::DATA), spec.tiled ? static_cast<cc::DataManager&>(tiled_data)
                                                      : standard);
    setup.bindColumn(column(cc::MS::FLAG), spec.tiled ? static_cast<cc::DataManager&>(tiled_flag)
                                                      : standard);
    impl_->ms = std::make_unique<cc::MeasurementSet>(setup, 0);
    auto& ms = *impl_->ms;
    ms.createDefaultSubtables(cc::Table::New);
    cc::MSMainColumns cols(ms);
    cols.setUVWRef(cc::Muvw::J2000);
    cc::TableColumn(ms, column(cc::MS::DATA)).rwKeywordSet().define("UNIT", spec.data_unit);
    // The constants once: rows added after row 0 repeat them.
    ms.addRow(1);
    cols.arrayId().put(0, 0);
    cols.dataDescId().put(0, 0);
    cols.exposure().put(0, spec.integration_s);
    cols.interval().put(0, spec.integration_s);
    cols.feed1().put(0, 0);
    cols.feed2().put(0, 0);
    cols.fieldId().put(0, 0);
    cols.flagRow().put(0, false);
    cols.observationId().put(0, 0);
    cols.processorId().put(0, -1);
    cols.scanNumber().put(0, 1);
    cols.stateId().put(0, -1);
    cols.weight().put(0, cc::Vector<float>(1, 1.0f));
    cols.sigma().put(0, cc::Vector<float>(1, 1.0f));
    impl_->data = std::make_unique<cc::ArrayColumn<cc::Complex>>(ms, column(cc::MS::DATA));
    impl_->flag = std::make_unique<cc::ArrayColumn<bool>>(ms, column(cc::MS::FLAG));
  });
}

TableWriter::~TableWriter() {
  try {
    close();
  } catch (...) {
  }
}

std::int64_t TableWriter::rows() const { return static_cast<std::int64_t>(impl_->ms->nrow()); }

void TableWriter::add_rows(std::int64_t count) {
  guarded("adding rows", [&] { impl_->ms->addRow(static_cast<cc::rownr_t>(count)); });
}

void TableWriter::put_rows(const RowBlock& b) {
  guarded("writing the rows", [&] {
    cc::MSMainColumns cols(*impl_->ms);
    const auto n = static_cast<size_t>(b.count);
    const Slicer range(IPosition(1, b.row0), IPosition(1, b.count));
    // casacore's arrays over the caller's memory (SHARE: no copy).
    const IPosition shape(1, b.count);
    cols.antenna1().putColumnRange(range, cc::Vector<int>(shape, const_cast<int*>(b.antenna1), cc::SHARE));
    cols.antenna2().putColumnRange(range, cc::Vector<int>(shape, const_cast<int*>(b.antenna2), cc::SHARE));
    const cc::Vector<double> time(shape, const_cast<double*>(b.time), cc::SHARE);
    cols.time().putColumnRange(range, time);
    cols.timeCentroid().putColumnRange(range, time);
    cols.uvw().putColumnRange(
        range, cc::Matrix<double>(IPosition(2, 3, static_cast<ssize_t>(n)), const_cast<double*>(b.uvw), cc::SHARE));
  });
}

void TableWriter::put_subtables(const Subtables& s) {
  guarded("writing the subtables", [&] {
    auto& ms = *impl_->ms;
    const auto nant = static_cast<cc::rownr_t>(s.antennas.size());
    cc::MSAntennaColumns ant(ms.antenna());
    ms.antenna().addRow(nant);
    cc::MSFeedColumns feed(ms.feed());
    ms.feed().addRow(nant);
    // One feed per antenna with two linear receptors (X, Y): what XX means.
    cc::Matrix<cc::Complex> response(2, 2, cc::Complex());
    response(0, 0) = response(1, 1) = cc::Complex(1, 0);
    cc::Vector<cc::String> receptors(2);
    receptors(0) = "X", receptors(1) = "Y";
    cc::Vector<double> angles(2);
    angles(0) = 0, angles(1) = kPi / 2;
    for (cc::rownr_t a = 0; a < nant; ++a) {
      const auto& antenna = s.antennas[a];
      cc::Vector<double> position(3);
      for (int k = 0; k < 3; ++k) position(k) = antenna.itrf[static_cast<size_t>(k)];
      ant.name().put(a, antenna.name);
      ant.station().put(a, antenna.station);
      ant.type().put(a, "GROUND-BASED");
      ant.mount().put(a, "ALT-AZ");
      ant.position().put(a, position);
      ant.offset().put(a, cc::Vector<double>(3, 0.0));
      ant.dishDiameter().put(a, antenna.dish_diameter_m);
      ant.flagRow().put(a, false);
      feed.antennaId().put(a, static_cast<int>(a));
      feed.feedId().put(a, 0);
      feed.spectralWindowId().put(a, -1);
      feed.time().put(a, s.start_s);
      feed.interval().put(a, 0);
      feed.numReceptors().put(a, 2);
      feed.beamId().put(a, -1);
      feed.beamOffset().put(a, cc::Matrix<double>(2, 2, 0.0));
      feed.polarizationType().put(a, receptors);
      feed.polResponse().put(a, response);
      feed.position().put(a, cc::Vector<double>(3, 0.0));
      feed.receptorAngle().put(a, angles);
    }
    cc::MSSpWindowColumns spw(ms.spectralWindow());
    ms.spectralWindow().addRow(1);
    const auto nchan = s.channel_hz.size();
    const cc::Vector<double> freq(s.channel_hz), width(nchan, s.channel_width_hz);
    spw.numChan().put(0, static_cast<int>(nchan));
    spw.name().put(0, s.field_name);
    spw.refFrequency().put(0, s.channel_hz.at(0));
    spw.chanFreq().put(0, freq);
    spw.chanWidth().put(0, width);
    spw.effectiveBW().put(0, width);
    spw.resolution().put(0, width);
    spw.totalBandwidth().put(0, s.bandwidth_hz);
    spw.measFreqRef().put(0, cc::MFrequency::TOPO);
    spw.netSideband().put(0, 1);
    spw.freqGroup().put(0, 0);
    spw.freqGroupName().put(0, "");
    spw.ifConvChain().put(0, 0);
    spw.flagRow().put(0, false);
    cc::MSPolarizationColumns pol(ms.polarization());
    ms.polarization().addRow(1);
    pol.numCorr().put(0, 1);
    pol.corrType().put(0, cc::Vector<int>(1, cc::Stokes::XX));
    pol.corrProduct().put(0, cc::Matrix<int>(2, 1, 0));
    pol.flagRow().put(0, false);
    cc::MSDataDescColumns dd(ms.dataDescription());
    ms.dataDescription().addRow(1);
    dd.spectralWindowId().put(0, 0);
    dd.polarizationId().put(0, 0);
    dd.flagRow().put(0, false);
    cc::MSFieldColumns field(ms.field());
    field.setDirectionRef(cc::MDirection::J2000);
    ms.field().addRow(1);
    cc::Matrix<double> direction(2, 1);
    direction(0, 0) = s.ra_rad, direction(1, 0) = s.dec_rad;
    field.name().put(0, s.field_name);
    field.code().put(0, "");
    field.time().put(0, s.start_s);
    field.numPoly().put(0, 0);
    field.delayDir().put(0, direction);
    field.phaseDir().put(0, direction);
    field.referenceDir().put(0, direction);
    field.sourceId().put(0, -1);
    field.flagRow().put(0, false);
    cc::MSObservationColumns observation(ms.observation());
    ms.observation().addRow(1);
    cc::Vector<double> range(2);
    range(0) = s.start_s, range(1) = s.end_s;
    observation.telescopeName().put(0, s.telescope);
    observation.timeRange().put(0, range);
    observation.observer().put(0, "iotest");
    observation.project().put(0, "iotest");
    observation.scheduleType().put(0, "");
    observation.releaseDate().put(0, 0);
    observation.flagRow().put(0, false);
    observation.log().put(0, cc::Vector<cc::String>(1, s.log));
    observation.schedule().put(0, cc::Vector<cc::String>(1, ""));
  });
}

void TableWriter::put(const Box& box, const std::complex<float>* data, const bool* flags) {
  guarded("writing visibilities", [&] {
    impl_->data->putColumnRange(rows_of(box), channels_of(box),
                                cc::Array<cc::Complex>(cube_of(box), const_cast<cc::Complex*>(data), cc::SHARE));
    impl_->flag->putColumnRange(rows_of(box), channels_of(box),
                                cc::Array<bool>(cube_of(box), const_cast<bool*>(flags), cc::SHARE));
  });
}

void TableWriter::get(const Box& box, std::complex<float>* data, bool* flags) const {
  guarded("reading visibilities back", [&] {
    cc::Array<cc::Complex> d(cube_of(box), data, cc::SHARE);
    cc::Array<bool> f(cube_of(box), flags, cc::SHARE);
    impl_->data->getColumnRange(rows_of(box), channels_of(box), d, false);
    impl_->flag->getColumnRange(rows_of(box), channels_of(box), f, false);
  });
}

void TableWriter::put_flags(const Box& box, bool value) {
  guarded("writing flags", [&] {
    impl_->flag->putColumnRange(rows_of(box), channels_of(box), cc::Array<bool>(cube_of(box), value));
  });
}

void TableWriter::set_keyword(const std::string& name, const std::string& value) {
  guarded("writing a keyword", [&] { impl_->ms->rwKeywordSet().define(name, value); });
}

void TableWriter::put_int64_table(const std::string& name, const std::vector<std::string>& columns,
                                  const std::vector<std::int64_t>& values) {
  guarded("writing a subtable", [&] {
    cc::TableDesc td;
    for (const auto& c : columns) td.addColumn(cc::ScalarColumnDesc<cc::Int64>(c));
    cc::SetupNewTable setup(std::string(impl_->ms->tableName()) + "/" + name, td, cc::Table::New);
    const size_t rows = values.size() / columns.size();
    cc::Table table(setup, static_cast<cc::rownr_t>(rows));
    for (size_t k = 0; k < columns.size(); ++k) {
      cc::ScalarColumn<cc::Int64> col(table, columns[k]);
      for (size_t i = 0; i < rows; ++i) col.put(i, values[i * columns.size() + k]);
    }
    impl_->ms->rwKeywordSet().defineTable(name, table);
  });
}

std::string TableWriter::data_file() const {
  return guarded("finding DATA's file", [&] {
    const cc::DataManager* dm = impl_->ms->findDataManager("DATA", true);
    const bool tiled = dm->dataManagerType() == "TiledColumnStMan";
    return std::string(dm->fileName()) + (tiled ? "_TSM0" : "");  // its one hypercube's
  });
}

void TableWriter::flush() {
  // MeasurementSet::flush(sync) flushes the main table and its subtables.
  guarded("flushing", [&] { impl_->ms->flush(true); });
}

void TableWriter::close() {
  if (!impl_->ms) return;
  impl_->data.reset();
  impl_->flag.reset();
  guarded("closing", [&] { impl_->ms.reset(); });
}

// Never closed, nor deleted by casacore: closing would flush into what may
// be a full disk, and a table marked for delete removes its folder when it
// is destroyed, throwing from the destructor (so std::terminate) where the
// output's claim is removing the same folder (seen: a full disk's job
// ending in SIGABRT). The objects are leaked; the caller and the claim
// remove the files.
void TableWriter::discard() noexcept {
  (void)impl_->data.release();
  (void)impl_->flag.release();
  (void)impl_->ms.release();
}

struct TableReader::Impl {
  cc::MeasurementSet ms;
  std::unique_ptr<cc::ArrayColumn<cc::Complex>> data;
  std::unique_ptr<cc::ArrayColumn<double>> uvw;
};

TableReader::TableReader(const std::string& path) {
  guarded("opening the MeasurementSet", [&] {
    // No locks: a published MS is never written again.
    impl_ = std::unique_ptr<Impl>(
        new Impl{cc::MeasurementSet(path, cc::TableLock(cc::TableLock::NoLocking), cc::Table::Old),
                 nullptr, nullptr});
    if (has_column("DATA"))
      impl_->data = std::make_unique<cc::ArrayColumn<cc::Complex>>(impl_->ms, "DATA");
    if (has_column("UVW")) impl_->uvw = std::make_unique<cc::ArrayColumn<double>>(impl_->ms, "UVW");
  });
}

TableReader::~TableReader() = default;

std::int64_t TableReader::rows() const { return static_cast<std::int64_t>(impl_->ms.nrow()); }
bool TableReader::has_column(const std::string& name) const {
  return impl_->ms.tableDesc().isColumn(name);
}
bool TableReader::has_keyword(const std::string& name) const {
  return impl_->ms.keywordSet().isDefined(name);
}
std::string TableReader::keyword(const std::string& name) const {
  return guarded("reading a keyword", [&] { return std::string(impl_->ms.keywordSet().asString(name)); });
}
std::int64_t TableReader::spectral_windows() const {
  return guarded("reading SPECTRAL_WINDOW",
                 [&] { return static_cast<std::int64_t>(impl_->ms.spectralWindow().nrow()); });
}
std::vector<double> TableReader::channel_hz() const {
  return guarded("reading SPECTRAL_WINDOW", [&] {
    const cc::MSSpWindowColumns spw(impl_->ms.spectralWindow());
    const cc::Vector<double> f = spw.chanFreq()(0);
    return std::vector<double>(f.begin(), f.end());
  });
}

std::vector<std::int64_t> TableReader::int64_table(const std::string& name,
                                                const std::vector<std::string>& columns,
                                                std::string& missing) const {
  return guarded("reading a subtable", [&] {
    const cc::Table table = impl_->ms.keywordSet().asTable(name);
    missing.clear();
    for (const auto& c : columns)
      if (!table.tableDesc().isColumn(c)) {
        missing = c;
        return std::vector<std::int64_t>();
      }
    std::vector<std::int64_t> values(table.nrow() * columns.size());
    for (size_t k = 0; k < columns.size(); ++k) {
      const cc::ScalarColumn<cc::Int64> col(table, columns[k]);
      for (size_t i = 0; i < table.nrow(); ++i) values[i * columns.size() + k] = col(i);
    }
    return values;
  });
}

std::array<double, 3> TableReader::uvw(std::int64_t row) const {
  return guarded("reading UVW", [&] {
    const cc::Vector<double> v = (*impl_->uvw)(static_cast<cc::rownr_t>(row));
    return std::array<double, 3>{v(0), v(1), v(2)};
  });
}

void TableReader::get(const Box& box, std::complex<float>* data) const {
  guarded("reading DATA", [&] {
    cc::Array<cc::Complex> d(cube_of(box), data, cc::SHARE);
    impl_->data->getColumnRange(rows_of(box), channels_of(box), d, false);
  });
}

}  // namespace iotest::storage::ms
