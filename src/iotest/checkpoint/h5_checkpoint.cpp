#include "iotest/checkpoint/h5_checkpoint.hpp"

#include <fmt/format.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/mpi_agree.hpp"
#include "iotest/storage/hdf5/hdf5_handles.hpp"
#include "iotest/storage/phdf5/mpio_hints.hpp"

namespace iotest::checkpoint {

#ifndef H5_HAVE_PARALLEL

report::Report h5(const H5Options&, MPI_Comm comm) {
  agree_on_usage(comm, [] {
    throw UsageError("h5",
                     "needs parallel HDF5 (this iotest was built with the serial one; "
                     "install libhdf5-openmpi-dev and rebuild)");
  });
  return {};
}

#else

namespace {

using storage::hdf5::check;
using storage::hdf5::check_id;
using storage::hdf5::Id;

// The value at step t and global cell (x, y, z): integers, exact in a
// double, different in every cell and step.
double pattern(int t, long long x, long long y, long long z, const std::array<long long, 3>& g) {
  return static_cast<double>(((t * g[0] + x) * g[1] + y) * g[2] + z);
}

std::string io_mode_text(H5D_mpio_actual_io_mode_t mode) {
  switch (mode) {
    case H5D_MPIO_NO_COLLECTIVE:
      return "independent";
    case H5D_MPIO_CHUNK_INDEPENDENT:
      return "chunked, independent";
    case H5D_MPIO_CHUNK_COLLECTIVE:
      return "chunked, collective";
    case H5D_MPIO_CHUNK_MIXED:
      return "chunked, mixed";
    case H5D_MPIO_CONTIGUOUS_COLLECTIVE:
      return "contiguous, collective";
  }
  return "unknown";
}

// H5Pget_mpio_no_collective_cause's bits, in words.
std::string cause_text(uint32_t cause) {
  if (cause == H5D_MPIO_COLLECTIVE) return "";
  const std::pair<uint32_t, const char*> words[] = {
      {H5D_MPIO_SET_INDEPENDENT, "independent transfers asked"},
      {H5D_MPIO_DATATYPE_CONVERSION, "datatype conversion"},
      {H5D_MPIO_DATA_TRANSFORMS, "data transforms"},
      {H5D_MPIO_MPI_OPT_TYPES_ENV_VAR_DISABLED, "MPI derived types disabled"},
      {H5D_MPIO_NOT_SIMPLE_OR_SCALAR_DATASPACES, "dataspaces not simple"},
      {H5D_MPIO_NOT_CONTIGUOUS_OR_CHUNKED_DATASET, "layout neither contiguous nor chunked"},
      {H5D_MPIO_PARALLEL_FILTERED_WRITES_DISABLED, "filtered writes disabled"},
      {H5D_MPIO_ERROR_WHILE_CHECKING_COLLECTIVE_POSSIBLE, "error while checking"}};
  std::string s;
  for (const auto& [bit, word] : words)
    if (cause & bit) s += (s.empty() ? "" : ", ") + std::string(word);
  return s.empty() ? fmt::format("cause 0x{:x}", cause) : s;
}

H5D_alloc_time_t alloc_time(const std::string& name) {
  if (name == "early") return H5D_ALLOC_TIME_EARLY;
  if (name == "late") return H5D_ALLOC_TIME_LATE;
  return H5D_ALLOC_TIME_INCR;
}

// The process grid (MPI_Dims_create's where not given) and the chunk (the
// domain where not given), from options agreed on every rank.
struct H5Layout {
  std::array<int, 3> grid;
  std::array<long long, 3> chunk;
};
H5Layout check_h5_options(const H5Options& o, MPI_Comm comm, int rank, int size) {
  H5Layout l{o.grid, o.chunk};
  auto& grid = l.grid;
  agree_on_usage(comm, [&] {
    if (o.path.empty()) throw UsageError("FILE", "expected the shared file to write");
    if (o.steps < 1) throw UsageError("--steps", "expected at least 1 step");
    for (int a = 0; a < 3; ++a) {
      if (o.domain[static_cast<size_t>(a)] < 1)
        throw UsageError("--domain", "expected NX,NY,NZ values per rank, each at least 1");
      if (grid[static_cast<size_t>(a)] < 0) throw UsageError("--grid", "expected PX,PY,PZ >= 0");
    }
    if (std::any_of(grid.begin(), grid.end(), [](int p) { return p > 0; }) &&
        std::all_of(grid.begin(), grid.end(), [](int p) { return p > 0; }) &&
        grid[0] * grid[1] * grid[2] != size)
      throw UsageError("--grid", fmt::format("expected {} ranks in all, got {}x{}x{}", size,
                                             grid[0], grid[1], grid[2]));
    if (MPI_Dims_create(size, 3, grid.data()) != MPI_SUCCESS)
      throw UsageError("--grid", fmt::format("cannot lay {} ranks out on {}x{}x{}", size, o.grid[0],
                                             o.grid[1], o.grid[2]));
    for (int a = 0; a < 3; ++a) {
      auto& c = l.chunk[static_cast<size_t>(a)];
      if (c == 0) c = o.domain[static_cast<size_t>(a)];
      if (c < 1 || c > o.domain[static_cast<size_t>(a)] * grid[static_cast<size_t>(a)])
        throw UsageError("--chunk", "expected CX,CY,CZ from 1 to the global domain");
    }
    if (o.alloc != "early" && o.alloc != "late" && o.alloc != "incremental")
      throw UsageError("--alloc", "expected early, late or incremental, got '" + o.alloc + "'");
    for (const auto& h : o.hints)
      if (!storage::is_hint(h)) throw UsageError("--hint", "expected KEY=VALUE, got '" + h + "'");
    if (rank == 0 && ::access(o.path.c_str(), F_OK) == 0)
      throw UsageError(o.path, "exists: iotest h5 writes a new file (remove it first)");
  });
  return l;
}

// This rank's place in the grid: its block of each step of the dataset
// (steps x global domain), and the block's values.
struct RankBlock {
  MPI_Comm cart = MPI_COMM_NULL;  // the grid's Cartesian communicator
  std::array<long long, 3> d{}, global{}, origin{};
  hsize_t dims[4] = {}, block[4] = {};
  RankBlock(const H5Options& o, const H5Layout& l, MPI_Comm comm, int rank) : d(o.domain) {
    const std::array<int, 3> periods{0, 0, 0};
    MPI_Cart_create(comm, 3, l.grid.data(), periods.data(), 0, &cart);
    std::array<int, 3> coords{};
    MPI_Cart_coords(cart, rank, 3, coords.data());
    for (size_t a = 0; a < 3; ++a) global[a] = o.domain[a] * l.grid[a];
    for (size_t a = 0; a < 3; ++a) origin[a] = coords[a] * d[a];
    const hsize_t shape[4] = {static_cast<hsize_t>(o.steps), static_cast<hsize_t>(global[0]),
                              static_cast<hsize_t>(global[1]), static_cast<hsize_t>(global[2])};
    const hsize_t mine[4] = {1, static_cast<hsize_t>(d[0]), static_cast<hsize_t>(d[1]),
                             static_cast<hsize_t>(d[2])};
    std::copy(shape, shape + 4, dims);
    std::copy(mine, mine + 4, block);
  }
  size_t size() const { return static_cast<size_t>(d[0] * d[1] * d[2]); }
  // The block's values at step `step`.
  void fill(int step, std::vector<double>& out) const {
    size_t i = 0;
    for (long long x = 0; x < d[0]; ++x)
      for (long long y = 0; y < d[1]; ++y)
        for (long long z = 0; z < d[2]; ++z)
          out[i++] = pattern(step, origin[0] + x, origin[1] + y, origin[2] + z, global);
  }
  // The block of step `step` in `dataset`'s file space.
  hid_t select(hid_t dataset, int step) const {
    const hid_t slab = check_id(H5Dget_space(dataset), "H5Dget_space");
    const hsize_t start[4] = {static_cast<hsize_t>(step), static_cast<hsize_t>(origin[0]),
                              static_cast<hsize_t>(origin[1]), static_cast<hsize_t>(origin[2])};
    check(H5Sselect_hyperslab(slab, H5S_SELECT_SET, start, nullptr, block, nullptr), "hyperslab");
    return slab;
  }
};

// The dataset's creation and access properties, as seism-core's knobs
// set them.
struct DatasetLists {
  Id dcpl, dapl;
};
DatasetLists dataset_lists(const H5Options& o, const H5Layout& l) {
  const hsize_t chunk_dims[4] = {1, static_cast<hsize_t>(l.chunk[0]),
                                 static_cast<hsize_t>(l.chunk[1]),
                                 static_cast<hsize_t>(l.chunk[2])};
  DatasetLists p{Id(check_id(H5Pcreate(H5P_DATASET_CREATE), "dcpl"), H5Pclose), Id()};
  check(H5Pset_chunk(p.dcpl, 4, chunk_dims), "H5Pset_chunk");
  if (o.never_fill) check(H5Pset_fill_time(p.dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  check(H5Pset_alloc_time(p.dcpl, alloc_time(o.alloc)), "H5Pset_alloc_time");
  p.dapl = Id(check_id(H5Pcreate(H5P_DATASET_ACCESS), "dapl"), H5Pclose);
  if (o.chunk_cache > 0)
    check(H5Pset_chunk_cache(p.dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT,
                             static_cast<size_t>(o.chunk_cache), H5D_CHUNK_CACHE_W0_DEFAULT),
          "H5Pset_chunk_cache");
  return p;
}

// The file's access through the MPI-IO driver, with the metadata and
// alignment knobs.
hid_t parallel_access(const H5Options& o, MPI_Comm cart, MPI_Info info) {
  const hid_t fapl = check_id(H5Pcreate(H5P_FILE_ACCESS), "fapl");
  check(H5Pset_fapl_mpio(fapl, cart, info), "H5Pset_fapl_mpio");
  if (o.collective_metadata) {
    check(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops");
    check(H5Pset_coll_metadata_write(fapl, true), "H5Pset_coll_metadata_write");
  }
  if (o.alignment > 0)
    check(H5Pset_alignment(fapl, 0, static_cast<hsize_t>(o.alignment)), "H5Pset_alignment");
  return fapl;
}

// Serial: rank 0 creates and allocates the file with the default driver
// before the parallel open; every rank learns whether it could.
void precreate_on_rank_0(const H5Options& o, hid_t space, hid_t dcpl, MPI_Comm comm, int rank) {
  std::string failed;
  if (rank == 0) {
    const hid_t file = H5Fcreate(o.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t set = file < 0 ? -1
                               : H5Dcreate2(file, "data", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT,
                                            dcpl, H5P_DEFAULT);
    if (file < 0 || set < 0) failed = "creating " + o.path + " on rank 0 failed";
    if (set >= 0) H5Dclose(set);
    if (file >= 0 && H5Fclose(file) < 0) failed = "closing " + o.path + " on rank 0 failed";
  }
  int bad = failed.empty() ? 0 : 1;
  MPI_Bcast(&bad, 1, MPI_INT, 0, comm);
  if (bad) throw std::runtime_error(rank == 0 ? failed : "rank 0 could not precreate the file");
}

// The shared file and its dataset, open in parallel.
struct SharedFile {
  Id fapl, file, set;
};
// Created (or, precreated by rank 0 alone, opened) between barriers: the
// creation's time.
double create_shared_file(const H5Options& o, const RankBlock& b, const DatasetLists& lists,
                          MPI_Info info, MPI_Comm comm, int rank, SharedFile& f) {
  Id space(check_id(H5Screate_simple(4, b.dims, nullptr), "dataspace"), H5Sclose);
  MPI_Barrier(comm);
  const double t = MPI_Wtime();
  if (o.precreate) precreate_on_rank_0(o, space, lists.dcpl, comm, rank);
  f.fapl = Id(parallel_access(o, b.cart, info), H5Pclose);
  f.file = Id(o.precreate ? H5Fopen(o.path.c_str(), H5F_ACC_RDWR, f.fapl)
                          : H5Fcreate(o.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, f.fapl),
              H5Fclose);
  check_id(f.file, o.precreate ? "opening the precreated file" : "creating the file");
  f.set = Id(o.precreate ? H5Dopen2(f.file, "data", lists.dapl)
                         : H5Dcreate2(f.file, "data", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT,
                                      lists.dcpl, lists.dapl),
             H5Dclose);
  check_id(f.set, "the dataset");
  MPI_Barrier(comm);
  return MPI_Wtime() - t;
}

// Whether the file's metadata reads and writes are collective, as HDF5
// took the knobs.
void read_metadata_modes(hid_t file, report::Checkpoint& c) {
  Id access(check_id(H5Fget_access_plist(file), "H5Fget_access_plist"), H5Pclose);
  hbool_t reads = false, writes = false;
  check(H5Pget_all_coll_metadata_ops(access, &reads), "H5Pget_all_coll_metadata_ops");
  check(H5Pget_coll_metadata_write(access, &writes), "H5Pget_coll_metadata_write");
  c.metadata_reads_collective = reads;
  c.metadata_writes_collective = writes;
}

// Each step: this rank's block of the slice, each write timed between
// barriers.
std::vector<double> write_steps(const H5Options& o, const RankBlock& b, hid_t set, hid_t memory,
                                hid_t dxpl, std::vector<double>& values, MPI_Comm comm) {
  std::vector<double> step_s(static_cast<size_t>(o.steps));
  for (int step = 0; step < o.steps; ++step) {
    b.fill(step, values);  // outside the timing: the simulation's work
    Id slab(b.select(set, step), H5Sclose);
    MPI_Barrier(comm);
    const double t = MPI_Wtime();
    check(H5Dwrite(set, H5T_NATIVE_DOUBLE, memory, slab, dxpl, values.data()), "H5Dwrite");
    MPI_Barrier(comm);
    step_s[static_cast<size_t>(step)] = MPI_Wtime() - t;
  }
  return step_s;
}

// Durable: H5Fflush reaches MPI_File_sync through the MPI-IO driver. The
// flush and close's time.
double flush_and_close(SharedFile& f, MPI_Comm comm) {
  MPI_Barrier(comm);
  const double t = MPI_Wtime();
  check(H5Fflush(f.file, H5F_SCOPE_GLOBAL), "H5Fflush");
  f.set.reset();
  f.file.reset();
  MPI_Barrier(comm);
  return MPI_Wtime() - t;
}

// Every value of this rank's blocks, read back: how many differ.
index_t read_back(const H5Options& o, const RankBlock& b, const SharedFile& f, hid_t dapl,
                  hid_t memory, hid_t dxpl, std::vector<double>& values) {
  Id again(check_id(H5Fopen(o.path.c_str(), H5F_ACC_RDONLY, f.fapl), "reopening"), H5Fclose);
  Id data(check_id(H5Dopen2(again, "data", dapl), "the dataset"), H5Dclose);
  std::vector<double> want(values.size());
  index_t wrong = 0;
  for (int step = 0; step < o.steps; ++step) {
    Id slab(b.select(data, step), H5Sclose);
    check(H5Dread(data, H5T_NATIVE_DOUBLE, memory, slab, dxpl, values.data()), "H5Dread");
    b.fill(step, want);
    for (size_t i = 0; i < values.size(); ++i) wrong += values[i] != want[i];
  }
  return wrong;
}

// Rank 0's figures of the whole run: the slowest rank's times, the wrong
// values summed, how HDF5 transferred.
struct H5Figures {
  double create_s = 0, close_s = 0;
  std::vector<double> slowest;  // per step
  index_t wrong = 0;
  H5D_mpio_actual_io_mode_t mode = H5D_MPIO_NO_COLLECTIVE;
  uint32_t global_cause = 0;
};

void describe_checkpoint(report::Checkpoint& c, const H5Options& o, const H5Layout& l, int size,
                         const RankBlock& b, const H5Figures& f) {
  c.path = o.path;
  c.ranks = size;
  c.steps = o.steps;
  c.grid = l.grid;
  c.domain = o.domain;
  c.chunk = l.chunk;
  c.transfer = o.collective ? "collective" : "independent";
  c.collective_metadata = o.collective_metadata;
  c.never_fill = o.never_fill;
  c.alloc = o.alloc;
  c.precreate = o.precreate;
  c.alignment = o.alignment;
  c.chunk_cache = o.chunk_cache;
  c.hints = o.hints;
  c.bytes_per_step = b.global[0] * b.global[1] * b.global[2] * static_cast<index_t>(sizeof(double));
  c.bytes = c.bytes_per_step * o.steps;
  c.create_s = f.create_s;
  c.close_s = f.close_s;
  c.step_s = f.slowest;
  for (const double s : f.slowest) c.write_s += s;
  c.raw_bytes_per_s = c.write_s > 0 ? static_cast<double>(c.bytes) / c.write_s : 0;
  const double all = f.create_s + c.write_s + f.close_s;
  c.aggregate_bytes_per_s = all > 0 ? static_cast<double>(c.bytes) / all : 0;
  c.io_mode = io_mode_text(f.mode);
  c.no_collective_cause = cause_text(f.global_cause);
  c.values_wrong = f.wrong;
}

}  // namespace

report::Report h5(const H5Options& o, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto layout = check_h5_options(o, comm, rank, size);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  RankBlock b(o, layout, comm, rank);
  MPI_Info info = storage::mpio_info(o.hints);
  const auto lists = dataset_lists(o, layout);

  H5Figures f;
  SharedFile file;
  f.create_s = create_shared_file(o, b, lists, info, comm, rank, file);
  report::Checkpoint c;
  read_metadata_modes(file.file, c);
  std::vector<double> values(b.size());
  Id memory(check_id(H5Screate_simple(4, b.block, nullptr), "memory space"), H5Sclose);
  Id dxpl(check_id(H5Pcreate(H5P_DATASET_XFER), "dxpl"), H5Pclose);
  check(H5Pset_dxpl_mpio(dxpl, o.collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT),
        "H5Pset_dxpl_mpio");
  const auto step_s = write_steps(o, b, file.set, memory, dxpl, values, comm);
  check(H5Pget_mpio_actual_io_mode(dxpl, &f.mode), "H5Pget_mpio_actual_io_mode");
  uint32_t local_cause = 0;
  check(H5Pget_mpio_no_collective_cause(dxpl, &local_cause, &f.global_cause),
        "H5Pget_mpio_no_collective_cause");
  f.close_s = flush_and_close(file, comm);
  if (o.check) {
    c.values_wrong = read_back(o, b, file, lists.dapl, memory, dxpl, values);
    c.checked = true;
  }
  // Every rank's figures: the slowest rank's times, the wrong values summed.
  f.slowest.resize(step_s.size());
  MPI_Reduce(step_s.data(), f.slowest.data(), o.steps, MPI_DOUBLE, MPI_MAX, 0, comm);
  MPI_Reduce(&c.values_wrong, &f.wrong, 1, MPI_INT64_T, MPI_SUM, 0, comm);
  MPI_Barrier(comm);
  if (rank == 0 && !o.keep) ::unlink(o.path.c_str());
  MPI_Info_free(&info);
  MPI_Comm_free(&b.cart);

  report::Report r;
  r.mode = "h5";
  if (rank != 0) return r;
  describe_checkpoint(c, o, layout, size, b, f);
  r.checkpoint = c;
  return r;
}

#endif

}  // namespace iotest::checkpoint
