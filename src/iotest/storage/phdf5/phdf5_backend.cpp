// The parallel HDF5 back-end: one UVH5 file for the whole run, shared by
// its writers (one per streamer) through the MPI-IO driver of the Open MPI
// build of HDF5, as users' clusters write to Lustre and GPFS.
//
// - Rank 0 of the writers creates the file alone: header, Data datasets,
//   and with --phdf5.alloc=early every chunk of visdata allocated
//   (seism-core's pre-creation). Then all open it in parallel; with
//   alloc=late, opening allocates the chunks, collectively.
// - A chunk split between subgrids of different streamers comes in parts
//   from several ranks: each writes only its part's values (the presence
//   bits), so parts cannot clobber one another, and records the part's
//   CRC-32 (combine_part_crc32 gives the chunk's).
// - Independent transfers: a whole chunk goes straight to its place
//   (H5Dwrite_chunk, as the hdf5 back-end: no selection, no conversion;
//   the chunks are allocated before anyone writes, so no rank changes the
//   file's metadata alone), a part as an H5Dwrite of its own values.
// - Collective transfers: chunks wait in a batch until a collective round.
//   The writers first agree (a non-blocking allreduce, polled with sleeps:
//   no core spins) on the most chunks any has, then all call H5Dwrite that
//   many times, one chunk each (a single hyperslab: HDF5 maps those fast,
//   where a union of many is mapped value by value), those with fewer with
//   empty selections. A writer with nothing to write joins its peers'
//   rounds every few milliseconds (idle()), so none waits for ever.
// - The file is synced (MPI_File_sync through H5Fflush) before it is
//   closed: the write time is the device's.
#include <fmt/format.h>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/common/mpi_wait.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5/hdf5_handles.hpp"
#include "iotest/storage/hdf5/uvh5_writer.hpp"
#include "iotest/storage/output/file_store.hpp"
#include "iotest/storage/phdf5/mpio_hints.hpp"
#include "iotest/storage/registry.hpp"

namespace iotest::storage {
namespace {

using hdf5::check;
using hdf5::check_id;
using hdf5::Id;
using hdf5::output_access;
using uvh5::library_lock;

struct Phdf5Settings {
  bool collective = false;           // collective transfers (else independent)
  bool collective_metadata = false;  // H5Pset_all_coll_metadata_ops, H5Pset_coll_metadata_write
  bool never_fill = true;            // H5D_FILL_TIME_NEVER
  bool allocate_early = true;        // rank 0 allocates every chunk at creation
  long long alignment = -1;          // H5Pset_alignment bytes (-1: the chunk size when whole pages)
  long long chunk_cache = 0;         // H5Pset_chunk_cache bytes (0: HDF5's default)
  std::vector<std::string> hints;    // MPI-IO hints, KEY=VALUE
  index_t batch = 16;                // chunks per collective round
};

class Phdf5Backend final : public Backend {
 public:
  explicit Phdf5Backend(Phdf5Settings s) : s_(std::move(s)) {}
  ~Phdf5Backend() override { abort(); }

  void share(MPI_Comm comm) override { comm_ = comm; }
  bool meets_others() const override { return s_.collective; }
  std::string_view name() const override { return "phdf5"; }
  std::string durability() const override { return "MPI_File_sync at close"; }
  index_t held_chunks() const override { return s_.collective ? s_.batch : 0; }

  // After a failure: peers may be gone, so nothing collective. The handles
  // are let go (closing an MPI-IO file is collective) and the file removed.
  void abort() noexcept override {
    const std::lock_guard<std::mutex> hold(library_lock());
    for (Id* id : {&space_, &memory_, &dxpl_, &complex_, &visdata_, &file_}) id->release();
    if (!temp_.empty()) std::remove(temp_.c_str());
    temp_.clear();
  }

 protected:
  void do_open(const std::string& partial) override {
    if (comm_ == MPI_COMM_NULL) throw std::logic_error("phdf5 needs the writers' communicator");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    temp_ = partial;
    const std::lock_guard<std::mutex> hold(library_lock());
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions, not prints
    create_alone();
    open_parallel();
    Id dataset_access(check_id(H5Pcreate(H5P_DATASET_ACCESS), "dapl"), H5Pclose);
    if (s_.chunk_cache > 0)
      check(H5Pset_chunk_cache(dataset_access, H5D_CHUNK_CACHE_NSLOTS_DEFAULT,
                               static_cast<size_t>(s_.chunk_cache), H5D_CHUNK_CACHE_W0_DEFAULT),
            "H5Pset_chunk_cache");
    visdata_ =
        Id(check_id(H5Dopen2(file_, "Data/visdata", dataset_access), "Data/visdata"), H5Dclose);
    complex_ = uvh5::complex_type();
    space_ = Id(check_id(H5Dget_space(visdata_), "visdata's dataspace"), H5Sclose);
    dxpl_ = Id(check_id(H5Pcreate(H5P_DATASET_XFER), "dxpl"), H5Pclose);
    check(H5Pset_dxpl_mpio(dxpl_, s_.collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT),
          "H5Pset_dxpl_mpio");
    const hsize_t chunk[3] = {static_cast<hsize_t>(layout().time_chunk),
                              static_cast<hsize_t>(layout().freq_chunk), 1};
    memory_ = Id(check_id(H5Screate_simple(3, chunk, nullptr), "a chunk's dataspace"), H5Sclose);
    if (s_.collective) {
      batch_values_.assign(static_cast<size_t>(s_.batch * layout().chunk_values()), cplx{});
      batch_present_.assign(static_cast<size_t>(s_.batch * layout().presence_words()), 0);
    }
    batch_.clear();
  }

  void do_write_chunk(const ChunkKey& key, const cplx* data, bool,
                      const PresenceWord* present) override {
    record_checksum(key, data, true);
    if (!s_.collective) {
      write_one(key, data, present);
      return;
    }
    const index_t at = static_cast<index_t>(batch_.size());
    std::copy(data, data + layout().chunk_values(),
              batch_values_.begin() + at * layout().chunk_values());
    if (present)
      std::copy(present, present + layout().presence_words(),
                batch_present_.begin() + at * layout().presence_words());
    batch_.push_back({key, present != nullptr});
    if (static_cast<index_t>(batch_.size()) == s_.batch) round(false);
  }

  void do_idle() override {
    if (s_.collective) round(false);
  }

  void do_flush() override {
    const std::lock_guard<std::mutex> hold(library_lock());
    if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0)
      throw storage_failure("flushing '" + temp_ + "' failed" + hdf5::innermost_error());
  }

  void do_close() override {
    if (s_.collective)
      while (!round(true)) {
      }
    {
      // The rest is collective: no rank spins waiting for the others. A
      // writer that finished first may wait here for minutes on a slow
      // shared file system; that is the others' writing, watched by their
      // own watchdogs, not a call of this one's.
      const PeersWait peers(progress());
      barrier(comm_);
    }
    {
      // Closed and opened again before /iotest is made: each writer's
      // metadata cache now holds what its own writes looked up, and HDF5
      // reads metadata collectively when creating objects, which needs
      // every rank to miss the same entries (else its broadcasts do not
      // match: MPI_ERR_TRUNCATE).
      const std::lock_guard<std::mutex> hold(library_lock());
      for (Id* id : {&space_, &memory_, &visdata_}) id->reset();
      file_.reset();
      open_parallel();
    }
    write_iotest_group();
    do_flush();
    const std::lock_guard<std::mutex> hold(library_lock());
    for (Id* id : {&space_, &memory_, &dxpl_, &complex_, &visdata_}) id->reset();
    file_.reset();
    temp_.clear();  // complete: kept, under its temporary name, until published
  }

 private:
  struct Queued {
    ChunkKey key;
    bool partial = false;  // its presence bits say which values to write
  };

  void set_alignment(hid_t access) const {
    const auto chunk_bytes = layout().chunk_bytes();
    const long long alignment =
        s_.alignment >= 0 ? s_.alignment : (chunk_bytes % 4096 == 0 ? chunk_bytes : 0);
    if (alignment > 1)
      check(H5Pset_alignment(access, static_cast<hsize_t>(alignment),
                             static_cast<hsize_t>(alignment)),
            "H5Pset_alignment");
  }

  // Every writer opens the file with the MPI-IO driver and the knobs.
  void open_parallel() {
    MPI_Info info = mpio_info(s_.hints);
    Id access = output_access();
    check(H5Pset_fapl_mpio(access, comm_, info), "H5Pset_fapl_mpio");
    MPI_Info_free(&info);
    if (s_.collective_metadata) {
      check(H5Pset_all_coll_metadata_ops(access, true), "H5Pset_all_coll_metadata_ops");
      check(H5Pset_coll_metadata_write(access, true), "H5Pset_coll_metadata_write");
    }
    set_alignment(access);
    file_ =
        Id(check_id(H5Fopen(temp_.c_str(), H5F_ACC_RDWR, access), "opening in parallel"), H5Fclose);
  }

  // Rank 0 alone, with the serial driver: the header and the Data group.
  // Its failure is every rank's.
  void create_alone() {
    std::string failed;
    if (rank_ == 0) {
      try {
        Id access = output_access();
        set_alignment(access);
        check(H5Pset_meta_block_size(access, 1 << 20), "metadata block size");
        Id file(H5Fcreate(temp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access), H5Fclose);
        if (file < 0)
          throw UsageError("OUTPUT", "cannot create '" + temp_ + "' (is the folder writable?)");
        uvh5::write_header(file, layout());
        uvh5::create_data(file, layout(), {s_.never_fill, s_.allocate_early});
        if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0)
          throw storage_failure("writing '" + temp_ + "' failed" + hdf5::innermost_error());
      } catch (const std::exception& e) {
        failed = e.what();
        std::remove(temp_.c_str());
      }
    }
    // The others wait without spinning: the header takes seconds at SKA
    // sizes, while their streamers plan FFTs.
    broadcast(comm_, 0, failed);
    if (!failed.empty()) {
      temp_.clear();  // rank 0 removed it
      throw std::runtime_error(failed);
    }
  }

  // A collective round: every writer says how many chunks it has and
  // whether it is closing; then all write as many chunks as the most any
  // has. Returns whether every writer is closing (the last round).
  bool round(bool closing) {
    const int mine[2] = {static_cast<int>(batch_.size()), closing ? 0 : 1};
    int most[2] = {0, 0};
    MPI_Request request;
    MPI_Iallreduce(mine, most, 2, MPI_INT, MPI_MAX, comm_, &request);
    wait_for(request);
    for (index_t i = 0; i < most[0]; ++i) {
      if (i >= static_cast<index_t>(batch_.size())) {
        write_one(ChunkKey{}, nullptr, nullptr);  // nothing: empty selections
        continue;
      }
      const auto& q = batch_[static_cast<size_t>(i)];
      write_one(q.key, batch_values_.data() + i * layout().chunk_values(),
                q.partial ? batch_present_.data() + i * layout().presence_words() : nullptr);
    }
    batch_.clear();
    return most[1] == 0;
  }

  // One chunk: `present` (nullptr: all) of its values where they belong,
  // the same selection in the file and in the chunk's buffer. A whole chunk
  // written independently goes straight to its place. `data` nullptr: no
  // values (a collective call's empty part).
  void write_one(const ChunkKey& key, const cplx* data, const PresenceWord* present) {
    const auto& l = layout();
    const auto row0 = static_cast<hsize_t>(key.row_chunk * l.time_chunk),
               chan0 = static_cast<hsize_t>(key.freq_chunk * l.freq_chunk);
    const std::lock_guard<std::mutex> hold(library_lock());
    if (data && !present && !s_.collective) {
      const hsize_t offset[3] = {row0, chan0, 0};
      if (H5Dwrite_chunk(visdata_, H5P_DEFAULT, 0, offset, static_cast<size_t>(l.chunk_bytes()),
                         data) < 0)
        throw storage_failure("writing '" + temp_ + "' failed" + hdf5::innermost_error());
      return;
    }
    bool first = true;
    const auto select = [&](index_t row, index_t rows, index_t channel, index_t channels) {
      const H5S_seloper_t how = first ? H5S_SELECT_SET : H5S_SELECT_OR;
      const hsize_t in_file[3] = {row0 + static_cast<hsize_t>(row),
                                  chan0 + static_cast<hsize_t>(channel), 0};
      const hsize_t in_chunk[3] = {static_cast<hsize_t>(row), static_cast<hsize_t>(channel), 0};
      const hsize_t count[3] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(channels), 1};
      check(H5Sselect_hyperslab(space_, how, in_file, nullptr, count, nullptr), "selection");
      check(H5Sselect_hyperslab(memory_, how, in_chunk, nullptr, count, nullptr), "selection");
      first = false;
    };
    if (data) {
      const index_t rows = std::min(l.time_chunk, l.rows() - key.row_chunk * l.time_chunk);
      const index_t chans = std::min(l.freq_chunk, l.channels - key.freq_chunk * l.freq_chunk);
      if (!present)
        select(0, rows, 0, chans);
      else
        for (index_t r = 0; r < rows; ++r)
          for (index_t c = 0; c < chans;) {  // runs of present values
            if (!storage::present(present, r * l.freq_chunk + c)) {
              ++c;
              continue;
            }
            index_t e = c;
            while (e < chans && storage::present(present, r * l.freq_chunk + e)) ++e;
            select(r, 1, c, e - c);
            c = e;
          }
    }
    if (first) {  // nothing to write
      check(H5Sselect_none(space_), "H5Sselect_none");
      check(H5Sselect_none(memory_), "H5Sselect_none");
    }
    // With an empty selection no value is read, but the buffer must exist.
    const cplx* from = data ? data : batch_values_.data();
    if (H5Dwrite(visdata_, complex_, memory_, space_, dxpl_, from) < 0)
      throw storage_failure("writing '" + temp_ + "' failed" + hdf5::innermost_error());
  }

  // /iotest, as the hdf5 back-end writes it: every writer's chunk
  // checksums (and a stonewalled run's written parts), each writer its
  // own rows of one dataset; only the row counts are gathered.
  void write_iotest_group() {
    std::vector<long long> sums;
    sums.reserve(2 * checksums().size());
    for (const auto& c : checksums()) sums.insert(sums.end(), {c.chunk, c.crc32});
    std::vector<long long> parts;
    for (const auto& p : written_parts())
      parts.insert(parts.end(), {p.w_stack, p.subgrid, p.row_chunk_begin, p.row_chunk_end});
    const std::lock_guard<std::mutex> hold(library_lock());
    Id group(check_id(H5Gcreate2(file_, "iotest", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "iotest"),
             H5Gclose);
    write_rows(group, "chunk_crc32", sums, 2);
    if (layout().provenance && layout().provenance->stonewalled)
      write_rows(group, "written_parts", parts, 4);
  }

  void write_rows(hid_t group, const char* name, const std::vector<long long>& flat,
                  hsize_t columns) {
    const long long mine = static_cast<long long>(flat.size() / columns);
    long long before = 0, total = 0;
    MPI_Exscan(&mine, &before, 1, MPI_LONG_LONG, MPI_SUM, comm_);
    if (rank_ == 0) before = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, comm_);
    Id shape = uvh5::space({static_cast<hsize_t>(total), columns});
    Id set(check_id(H5Dcreate2(group, name, H5T_NATIVE_LLONG, shape, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT),
                    name),
           H5Dclose);
    const hsize_t start[2] = {static_cast<hsize_t>(before), 0};
    const hsize_t count[2] = {static_cast<hsize_t>(mine), columns};
    const hsize_t n = std::max<hsize_t>(1, flat.size());
    Id memory(check_id(H5Screate_simple(1, &n, nullptr), name), H5Sclose);
    if (mine > 0)
      check(H5Sselect_hyperslab(shape, H5S_SELECT_SET, start, nullptr, count, nullptr), name);
    else
      check(H5Sselect_none(shape), name), check(H5Sselect_none(memory), name);
    check(
        H5Dwrite(set, H5T_NATIVE_LLONG, memory, shape, dxpl_, flat.empty() ? nullptr : flat.data()),
        name);
  }

  Phdf5Settings s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::string temp_;
  Id file_, visdata_, complex_, space_, memory_, dxpl_;
  std::vector<Queued> batch_;
  std::vector<cplx> batch_values_;  // collective transfers: the chunks awaiting a round
  std::vector<PresenceWord> batch_present_;
};

long long option_bytes(const StorageOptions& options, const std::string& key, long long fallback) {
  const auto it = options.values.find(key);
  if (it == options.values.end()) return fallback;
  long long value = -1;
  try {
    size_t used = 0;
    value = std::stoll(it->second, &used);
    if (used != it->second.size()) value = -1;
  } catch (const std::exception&) {
  }
  if (value < 0)
    throw UsageError("--" + key, "expected a count of bytes, got '" + it->second + "'");
  return value;
}

}  // namespace

BackendSpec phdf5_spec() {
  BackendSpec s;
  s.name = "phdf5";
  s.store = &file_store();
  s.summary =
      "one UVH5 file shared by every streamer, through parallel HDF5 over MPI-IO; "
      "readable by pyuvdata";
  s.shared = true;
  s.collective = true;
  s.options = {
      {"phdf5.transfer", "collective or independent transfers", false, "independent"},
      {"phdf5.collective-metadata", "collective metadata reads and writes", true, ""},
      {"phdf5.fill", "fill new chunks: never, or with zeros when allocated (alloc)", false,
       "never"},
      {"phdf5.alloc",
       "allocate visdata's chunks early (rank 0, at creation) or late (all, when opening)", false,
       "early"},
      {"phdf5.alignment", "H5Pset_alignment in bytes (default: the chunk size, if whole pages)",
       false, ""},
      {"phdf5.chunk-cache", "the chunk cache in bytes (default: HDF5's)", false, ""},
      {"phdf5.hints",
       "MPI-IO hints KEY=VALUE[,KEY=VALUE...] (striping_factor, striping_unit, cb_nodes, "
       "romio_cb_write)",
       false, ""},
      {"phdf5.batch", "chunks a writer gathers for each collective round", false, "16"},
  };
  s.make = [](const StorageOptions& o) -> std::unique_ptr<Backend> {
    Phdf5Settings p;
    p.collective = option_choice(o, "phdf5.transfer", "independent",
                                 {"collective", "independent"}) == "collective";
    p.collective_metadata = option_flag(o, "phdf5.collective-metadata");
    p.never_fill = option_choice(o, "phdf5.fill", "never", {"never", "alloc"}) == "never";
    p.allocate_early = option_choice(o, "phdf5.alloc", "early", {"early", "late"}) == "early";
    p.alignment = option_bytes(o, "phdf5.alignment", -1);
    p.chunk_cache = option_bytes(o, "phdf5.chunk-cache", 0);
    p.batch = option_bytes(o, "phdf5.batch", 16);
    if (p.batch < 1 || p.batch > 4096)
      throw UsageError("--phdf5.batch", fmt::format("expected 1 to 4096 chunks, got {}", p.batch));
    if (const auto it = o.values.find("phdf5.hints"); it != o.values.end()) {
      std::string list = it->second;
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string hint = list.substr(at, comma - at);
        if (!is_hint(hint))
          throw UsageError("--phdf5.hints",
                           "expected KEY=VALUE[,KEY=VALUE...], got '" + list + "'");
        p.hints.push_back(hint);
        at = comma + 1;
      }
    }
    return std::make_unique<Phdf5Backend>(std::move(p));
  };
  // Its output is UVH5: the hdf5 back-end's reader reads it.
  return s;
}

}  // namespace iotest::storage
