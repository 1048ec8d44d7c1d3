// HDF5 identifiers owned and closed (every HDF5 user of iotest: the hdf5
// back-end and the checkpoint kernel), and the checks that turn HDF5's
// negative returns into exceptions naming the call.
#pragma once

#include <hdf5.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace iotest::storage::hdf5 {

// The deepest entry of HDF5's error stack ("(file) unable to lock the
// file", an MPI error's text): what a failed call's one line adds. A file
// driver's write error spans lines ("file write failed: time = ...\n,
// filename = ..., errno = 122, error message = 'Disk quota exceeded', buf
// = ..."): kept to its first words and errno's text.
inline std::string innermost_error() {
  std::string deepest;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* to) -> herr_t {
        if (n == 0 && e->desc) *static_cast<std::string*>(to) = e->desc;
        return 0;
      },
      &deepest);
  const std::string quoted = "error message = '";
  if (const auto at = deepest.find(quoted); at != std::string::npos) {
    const auto begin = at + quoted.size(), end = deepest.find('\'', begin);
    deepest = deepest.substr(0, deepest.find(':')) + ": " + deepest.substr(begin, end - begin);
  }
  for (auto& c : deepest)
    if (c == '\n') c = ' ';
  return deepest.empty() ? std::string() : " (" + deepest + ")";
}
inline void check(herr_t status, const char* what) {
  if (status < 0)
    throw std::runtime_error(std::string("HDF5: ") + what + " failed" + innermost_error());
}
inline hid_t check_id(hid_t id, const char* what) {
  if (id < 0) throw std::runtime_error(std::string("HDF5: ") + what + " failed" + innermost_error());
  return id;
}

// Owns one HDF5 identifier and closes it with the right function.
class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    reset();
    id_ = std::exchange(o.id_, -1);
    close_ = o.close_;
    return *this;
  }
  ~Id() { reset(); }
  void reset() {
    if (id_ >= 0) close_(id_);
    id_ = -1;
  }
  // Lets the identifier go unclosed (closing can be collective, and the
  // peers may be gone).
  void release() { id_ = -1; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// A file access list for an output in progress: HDF5's own file lock
// off. The run's claim (output_claim.hpp) holds the file, and HDF5's lock,
// a flock() that NFS carries as a lock over the whole file, would clash
// with it.
inline Id output_access() {
  Id access(check_id(H5Pcreate(H5P_FILE_ACCESS), "fapl"), H5Pclose);
  check(H5Pset_file_locking(access, false, true), "H5Pset_file_locking");
  return access;
}

}  // namespace iotest::storage::hdf5
