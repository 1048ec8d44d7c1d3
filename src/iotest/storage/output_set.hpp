// An output set: the visibility files one run wrote (one per writer, or
// one shared file), opened for reading. `verify`, `grid` and the imaging
// direction take them the same way: every file once, one observation's
// shape and one run's provenance throughout.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "iotest/storage/reader.hpp"
#include "iotest/storage/registry.hpp"

namespace iotest::storage {

// The file's provenance; throws UsageError(path) for a file iotest did not write.
const Provenance& provenance_of(const Reader& file, const std::string& path);

// Opens every path (UsageError for a file given twice, a file iotest did
// not write, or one whose shape or provenance differs from the first's).
std::vector<std::unique_ptr<Reader>> open_output_set(const std::vector<std::string>& paths,
                                                     const StorageOptions& options = {});

}  // namespace iotest::storage
