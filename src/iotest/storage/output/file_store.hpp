// The file system's store: the outputs of posix, hdf5 and phdf5 (files)
// and of ms (folders: casacore tables), claimed with O_EXCL and a lock,
// published by rename (file_claim.hpp), their room found with statvfs.
#pragma once

#include "iotest/storage/output/output_store.hpp"

namespace iotest::storage {

// `folder`: each output is a folder, claimed and published whole.
const OutputStore& file_store(bool folder = false);

}  // namespace iotest::storage
