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
#include "iotest/telescope/observation.hpp"

namespace iotest::storage {

// The file's provenance; throws UsageError(path) for a file iotest did not write.
const Provenance& provenance_of(const Reader& file, const std::string& path);

// Opens every path (UsageError for a file given twice, a file iotest did
// not write, or one whose shape or provenance differs from the first's).
std::vector<std::unique_ptr<Reader>> open_output_set(const std::vector<std::string>& paths,
                                                     const StorageOptions& options = {});

// The set must hold `obs` whole, for the imaging direction: every file
// its shape, every chunk in some file (UsageError naming the first file
// otherwise, before any work). Returns the chunks the files hold (a chunk
// split between writers counts in each file that holds part of it).
index_t require_whole_observation(const std::vector<std::unique_ptr<Reader>>& files,
                                  const std::vector<std::string>& paths,
                                  const telescope::Observation& obs);

}  // namespace iotest::storage
