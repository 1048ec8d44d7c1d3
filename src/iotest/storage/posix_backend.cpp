// The posix back-end: raw chunks in one file per writer (to be written).
#include "iotest/common/errors.hpp"
#include "iotest/storage/registry.hpp"

namespace iotest::storage {

BackendSpec posix_spec() {
  BackendSpec s;
  s.name = "posix";
  s.summary = "raw chunks in one file per writer, with an index (not yet available)";
  s.make = [](const StorageOptions&) -> std::unique_ptr<Backend> {
    throw UsageError("--storage", "the posix back-end is not available yet");
  };
  return s;
}

}  // namespace iotest::storage
