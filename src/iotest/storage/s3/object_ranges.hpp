// Reading an s3 back-end's object: the posix format's reader
// (posix/posix_format.hpp) over ranged GETs of the object.
#pragma once

#include <memory>
#include <string>

#include "iotest/storage/reader.hpp"

namespace iotest::storage::s3 {

// Whether `path` is an s3:// object that starts as the posix format does
// (its first bytes fetched).
bool is_posix_format_object(const std::string& path);
// A reader of it; UsageError(path) where it is not a complete output.
std::unique_ptr<Reader> open_object_reader(const std::string& path);

}  // namespace iotest::storage::s3
