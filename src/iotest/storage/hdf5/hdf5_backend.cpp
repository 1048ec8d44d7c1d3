// The HDF5 back-end: one UVH5 file (the format pyuvdata reads) per writer,
// through the serial drivers, each chunk written whole (H5Dwrite_chunk).
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5/hdf5_handles.hpp"
#include "iotest/storage/hdf5/uvh5_reader.hpp"
#include "iotest/storage/hdf5/uvh5_writer.hpp"
#include "iotest/storage/output/file_store.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/write_behind.hpp"

namespace iotest::storage {
namespace {

using hdf5::check;
using hdf5::check_id;
using hdf5::Id;
using hdf5::output_access;
using uvh5::library_lock;
using uvh5::space;

class Hdf5Backend final : public Backend {
 public:
  void abort() noexcept override {
    const std::lock_guard<std::mutex> hold(library_lock());
    write_behind_ = WriteBehind();
    fd_ = -1;
    visdata_.reset();
    complex_.reset();
    file_.reset();
    if (!temp_.empty()) std::remove(temp_.c_str());
    temp_.clear();
  }

  ~Hdf5Backend() override { abort(); }
  std::string_view name() const override { return "hdf5"; }
  std::string durability() const override { return "write-behind, fsync at close"; }

 protected:
  void do_open(const std::string& partial) override {
    const std::lock_guard<std::mutex> hold(library_lock());
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions, not prints
    temp_ = partial;
    // Chunks of whole pages start on a multiple of their size: each write
    // then covers whole pages (ext4 zeroes the rest of a page it starts)
    // and, at powers of two, whole page-cache folios. Metadata comes in
    // 1 MiB blocks, so little of it falls between chunks.
    Id access = output_access();
    const auto chunk_bytes = static_cast<hsize_t>(layout().chunk_bytes());
    if (chunk_bytes % 4096 == 0)
      check(H5Pset_alignment(access, chunk_bytes, chunk_bytes), "chunk alignment");
    check(H5Pset_meta_block_size(access, 1 << 20), "metadata block size");
    file_ = Id(H5Fcreate(temp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access), H5Fclose);
    if (file_ < 0) {
      temp_.clear();
      throw UsageError("OUTPUT", "cannot create '" + partial + "' (is the folder writable?)");
    }
    uvh5::write_header(file_, layout());
    visdata_ = uvh5::create_data(file_, layout());
    complex_ = uvh5::complex_type();
    chunk_.assign(static_cast<size_t>(layout().chunk_values()), cplx{});
    // The sec2 driver's handle is the file's descriptor: for the fsyncs,
    // and for streaming the chunks to the device as they are written (the
    // header, synced by open(), is left to it).
    void* handle = nullptr;
    if (H5Fget_vfd_handle(file_, H5P_DEFAULT, &handle) >= 0 && handle) {
      fd_ = *static_cast<int*>(handle);
      write_behind_ = WriteBehind(fd_);
    }
  }

  // Whole chunks go straight to storage (H5Dwrite_chunk): no selection, no
  // type conversion (the compound {r, i} of doubles is std::complex's layout).
  void do_write_chunk(const ChunkKey& key, const cplx* data, bool accumulate,
                      const PresenceWord*) override {
    {
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
        throw storage_failure("writing '" + temp_ + "' failed" + hdf5::innermost_error());
      record_checksum(key, out);
    }
    // Outside the library's lock: waiting for the device here must not
    // hold up the other writer threads' HDF5 calls.
    write_behind_.wrote(layout().chunk_bytes());
  }

  void do_flush() override {
    const std::lock_guard<std::mutex> hold(library_lock());
    if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0)
      throw storage_failure("flushing '" + temp_ + "' failed" + hdf5::innermost_error());
    // H5Fflush hands the data to the kernel; fsync makes it durable, so
    // the write time is the device's, not the page cache's.
    if (fd_ >= 0 && ::fsync(fd_) != 0)
      throw storage_failure("fsync of '" + temp_ + "' failed: " + std::strerror(errno));
  }

  void do_close() override {
    write_iotest_group();
    do_flush();
    const std::lock_guard<std::mutex> hold(library_lock());
    write_behind_ = WriteBehind();
    fd_ = -1;
    visdata_.reset();
    complex_.reset();
    file_.reset();
    temp_.clear();  // complete: kept, under its temporary name, until published
  }

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

  std::string temp_;
  Id file_, visdata_, complex_;
  int fd_ = -1;  // the file's descriptor, HDF5's (sec2)
  WriteBehind write_behind_;
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
  s.store = &file_store();
  s.names = ".h5, .hdf5, .uvh5";
  s.named_by = [](const std::string& path) {
    for (const std::string_view suffix : {".h5", ".hdf5", ".uvh5"})
      if (path.ends_with(suffix)) return true;
    return false;
  };
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
