// MPI-IO hints (striping_factor, striping_unit, cb_nodes, romio_cb_write,
// ...) given as KEY=VALUE, passed through to the MPI library as IOR and
// seism-core do: for the phdf5 back-end and the checkpoint kernel.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace iotest::storage {

// Whether `hint` has the form KEY=VALUE with a key.
inline bool is_hint(const std::string& hint) {
  const auto eq = hint.find('=');
  return eq != std::string::npos && eq > 0;
}

// An MPI_Info holding the (checked) hints; the caller frees it.
inline MPI_Info mpio_info(const std::vector<std::string>& hints) {
  MPI_Info info;
  MPI_Info_create(&info);
  for (const auto& h : hints) {
    const auto eq = h.find('=');
    MPI_Info_set(info, h.substr(0, eq).c_str(), h.substr(eq + 1).c_str());
  }
  return info;
}

}  // namespace iotest::storage
