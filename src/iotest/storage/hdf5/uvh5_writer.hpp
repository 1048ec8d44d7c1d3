// Writing UVH5 (the format pyuvdata reads): the header iotest derives from
// the observation, and the Data group whose visdata holds one storage chunk
// per HDF5 chunk (a time-chunk x freq-chunk block of the baseline-time and
// frequency axes), a compound of r and i. flags and nsamples are fill
// values (false, 1): they take no space until written.
#pragma once

#include <hdf5.h>

#include <initializer_list>
#include <mutex>

#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5/hdf5_handles.hpp"

namespace iotest::storage::uvh5 {

// HDF5 is not built thread-safe: the threads of one process that call it
// take turns (DESIGN.md section 5; --fork-writer gives each writer its own
// process).
std::mutex& library_lock();

hdf5::Id space(std::initializer_list<hsize_t> dims);
// The visibilities' type: {r, i} doubles, std::complex's layout.
hdf5::Id complex_type();

// The Header group: antennas, per baseline-time antennas, times and (u, v,
// w), frequencies, the phase centre and iotest's provenance.
void write_header(hid_t file, const VisibilityLayout& layout);

// How visdata's storage is made (seism-core's knobs): HDF5 writes fill
// values into every chunk it allocates unless told never to, and
// allocates chunks as they are written unless told to at creation.
struct VisdataCreation {
  bool never_fill = false;
  bool allocate_early = false;
};
// The Data group; returns visdata, open.
hdf5::Id create_data(hid_t file, const VisibilityLayout& layout, const VisdataCreation& how = {});

}  // namespace iotest::storage::uvh5
