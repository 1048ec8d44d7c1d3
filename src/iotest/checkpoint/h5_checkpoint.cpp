#include "iotest/checkpoint/h5_checkpoint.hpp"

#include <fmt/format.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/mpi_agree.hpp"
#include "iotest/storage/hdf5_handles.hpp"
#include "iotest/storage/mpio_hints.hpp"

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

}  // namespace

report::Report h5(const H5Options& o, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::array<int, 3> grid = o.grid;
  std::array<long long, 3> chunk = o.chunk;
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
      auto& c = chunk[static_cast<size_t>(a)];
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
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);

  const std::array<int, 3> periods{0, 0, 0};
  MPI_Comm cart;
  MPI_Cart_create(comm, 3, grid.data(), periods.data(), 0, &cart);
  std::array<int, 3> coords{};
  MPI_Cart_coords(cart, rank, 3, coords.data());
  std::array<long long, 3> global{};
  for (size_t a = 0; a < 3; ++a) global[a] = o.domain[a] * grid[a];
  const hsize_t dims[4] = {static_cast<hsize_t>(o.steps), static_cast<hsize_t>(global[0]),
                           static_cast<hsize_t>(global[1]), static_cast<hsize_t>(global[2])};
  const hsize_t chunk_dims[4] = {1, static_cast<hsize_t>(chunk[0]), static_cast<hsize_t>(chunk[1]),
                                 static_cast<hsize_t>(chunk[2])};
  MPI_Info info = storage::mpio_info(o.hints);

  // The dataset's creation properties, as seism-core's knobs set them.
  Id dcpl(check_id(H5Pcreate(H5P_DATASET_CREATE), "dcpl"), H5Pclose);
  check(H5Pset_chunk(dcpl, 4, chunk_dims), "H5Pset_chunk");
  if (o.never_fill) check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  check(H5Pset_alloc_time(dcpl, alloc_time(o.alloc)), "H5Pset_alloc_time");
  Id dapl(check_id(H5Pcreate(H5P_DATASET_ACCESS), "dapl"), H5Pclose);
  if (o.chunk_cache > 0)
    check(H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT,
                             static_cast<size_t>(o.chunk_cache), H5D_CHUNK_CACHE_W0_DEFAULT),
          "H5Pset_chunk_cache");
  const auto parallel_access = [&] {
    const hid_t fapl = check_id(H5Pcreate(H5P_FILE_ACCESS), "fapl");
    check(H5Pset_fapl_mpio(fapl, cart, info), "H5Pset_fapl_mpio");
    if (o.collective_metadata) {
      check(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops");
      check(H5Pset_coll_metadata_write(fapl, true), "H5Pset_coll_metadata_write");
    }
    if (o.alignment > 0)
      check(H5Pset_alignment(fapl, 0, static_cast<hsize_t>(o.alignment)), "H5Pset_alignment");
    return fapl;
  };
  Id space(check_id(H5Screate_simple(4, dims, nullptr), "dataspace"), H5Sclose);

  // Create (or, precreated by rank 0 alone, open) the file and dataset.
  MPI_Barrier(comm);
  double t = MPI_Wtime();
  if (o.precreate) {
    std::string failed;
    if (rank == 0) {
      // Serial: rank 0 creates and allocates it with the default driver.
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
  Id fapl(parallel_access(), H5Pclose);
  Id file(o.precreate ? H5Fopen(o.path.c_str(), H5F_ACC_RDWR, fapl)
                      : H5Fcreate(o.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl),
          H5Fclose);
  check_id(file, o.precreate ? "opening the precreated file" : "creating the file");
  Id set(o.precreate ? H5Dopen2(file, "data", dapl)
                     : H5Dcreate2(file, "data", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl, dapl),
         H5Dclose);
  check_id(set, "the dataset");
  MPI_Barrier(comm);
  const double create_s = MPI_Wtime() - t;

  report::Checkpoint c;
  {
    Id access(check_id(H5Fget_access_plist(file), "H5Fget_access_plist"), H5Pclose);
    hbool_t reads = false, writes = false;
    check(H5Pget_all_coll_metadata_ops(access, &reads), "H5Pget_all_coll_metadata_ops");
    check(H5Pget_coll_metadata_write(access, &writes), "H5Pget_coll_metadata_write");
    c.metadata_reads_collective = reads;
    c.metadata_writes_collective = writes;
  }

  // Each step: this rank's block of the slice.
  const std::array<long long, 3> d = o.domain;
  const hsize_t block[4] = {1, static_cast<hsize_t>(d[0]), static_cast<hsize_t>(d[1]),
                            static_cast<hsize_t>(d[2])};
  std::array<long long, 3> origin{};
  for (size_t a = 0; a < 3; ++a) origin[a] = coords[a] * d[a];
  std::vector<double> values(static_cast<size_t>(d[0] * d[1] * d[2]));
  const auto fill = [&](int step, std::vector<double>& out) {
    size_t i = 0;
    for (long long x = 0; x < d[0]; ++x)
      for (long long y = 0; y < d[1]; ++y)
        for (long long z = 0; z < d[2]; ++z)
          out[i++] = pattern(step, origin[0] + x, origin[1] + y, origin[2] + z, global);
  };
  Id memory(check_id(H5Screate_simple(4, block, nullptr), "memory space"), H5Sclose);
  Id dxpl(check_id(H5Pcreate(H5P_DATASET_XFER), "dxpl"), H5Pclose);
  check(H5Pset_dxpl_mpio(dxpl, o.collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT),
        "H5Pset_dxpl_mpio");
  // This rank's block of step `step` in `dataset`'s file space.
  const auto select = [&](hid_t dataset, int step) {
    const hid_t slab = check_id(H5Dget_space(dataset), "H5Dget_space");
    const hsize_t start[4] = {static_cast<hsize_t>(step), static_cast<hsize_t>(origin[0]),
                              static_cast<hsize_t>(origin[1]), static_cast<hsize_t>(origin[2])};
    check(H5Sselect_hyperslab(slab, H5S_SELECT_SET, start, nullptr, block, nullptr), "hyperslab");
    return slab;
  };
  std::vector<double> step_s(static_cast<size_t>(o.steps));
  for (int step = 0; step < o.steps; ++step) {
    fill(step, values);  // outside the timing: the simulation's work
    Id slab(select(set, step), H5Sclose);
    MPI_Barrier(comm);
    t = MPI_Wtime();
    check(H5Dwrite(set, H5T_NATIVE_DOUBLE, memory, slab, dxpl, values.data()), "H5Dwrite");
    MPI_Barrier(comm);
    step_s[static_cast<size_t>(step)] = MPI_Wtime() - t;
  }
  H5D_mpio_actual_io_mode_t mode = H5D_MPIO_NO_COLLECTIVE;
  check(H5Pget_mpio_actual_io_mode(dxpl, &mode), "H5Pget_mpio_actual_io_mode");
  uint32_t local_cause = 0, global_cause = 0;
  check(H5Pget_mpio_no_collective_cause(dxpl, &local_cause, &global_cause),
        "H5Pget_mpio_no_collective_cause");

  // Durable: H5Fflush reaches MPI_File_sync through the MPI-IO driver.
  MPI_Barrier(comm);
  t = MPI_Wtime();
  check(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush");
  set.reset();
  file.reset();
  MPI_Barrier(comm);
  const double close_s = MPI_Wtime() - t;

  if (o.check) {  // every value of this rank's blocks, read back
    Id again(check_id(H5Fopen(o.path.c_str(), H5F_ACC_RDONLY, fapl), "reopening"), H5Fclose);
    Id data(check_id(H5Dopen2(again, "data", dapl), "the dataset"), H5Dclose);
    std::vector<double> want(values.size());
    for (int step = 0; step < o.steps; ++step) {
      Id slab(select(data, step), H5Sclose);
      check(H5Dread(data, H5T_NATIVE_DOUBLE, memory, slab, dxpl, values.data()), "H5Dread");
      fill(step, want);
      for (size_t i = 0; i < values.size(); ++i) c.values_wrong += values[i] != want[i];
    }
    c.checked = true;
  }
  // Every rank's figures: the slowest rank's times, the wrong values summed.
  std::vector<double> slowest(step_s.size());
  MPI_Reduce(step_s.data(), slowest.data(), o.steps, MPI_DOUBLE, MPI_MAX, 0, comm);
  index_t wrong = 0;
  MPI_Reduce(&c.values_wrong, &wrong, 1, MPI_INT64_T, MPI_SUM, 0, comm);
  MPI_Barrier(comm);
  if (rank == 0 && !o.keep) ::unlink(o.path.c_str());
  MPI_Info_free(&info);
  MPI_Comm_free(&cart);

  report::Report r;
  r.mode = "h5";
  if (rank != 0) return r;
  c.path = o.path;
  c.ranks = size;
  c.steps = o.steps;
  c.grid = grid;
  c.domain = o.domain;
  c.chunk = chunk;
  c.transfer = o.collective ? "collective" : "independent";
  c.collective_metadata = o.collective_metadata;
  c.never_fill = o.never_fill;
  c.alloc = o.alloc;
  c.precreate = o.precreate;
  c.alignment = o.alignment;
  c.chunk_cache = o.chunk_cache;
  c.hints = o.hints;
  c.bytes_per_step = global[0] * global[1] * global[2] * static_cast<index_t>(sizeof(double));
  c.bytes = c.bytes_per_step * o.steps;
  c.create_s = create_s;
  c.close_s = close_s;
  c.step_s = slowest;
  for (const double s : slowest) c.write_s += s;
  c.raw_bytes_per_s = c.write_s > 0 ? static_cast<double>(c.bytes) / c.write_s : 0;
  const double all = create_s + c.write_s + close_s;
  c.aggregate_bytes_per_s = all > 0 ? static_cast<double>(c.bytes) / all : 0;
  c.io_mode = io_mode_text(mode);
  c.no_collective_cause = cause_text(global_cause);
  c.values_wrong = wrong;
  r.checkpoint = c;
  return r;
}

#endif

}  // namespace iotest::checkpoint
