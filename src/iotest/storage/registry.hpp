// The storage back-ends users choose, after IOR's: `--storage=NAME`, each
// back-end's options under its own name (`--posix.direct`). This is the one
// place that knows which back-ends exist; each back-end is a folder of its
// own (its writer, reader and format) that describes itself with a
// BackendSpec, and names the store its outputs live in (output_store.hpp).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "iotest/common/store_description.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/output/output_store.hpp"
#include "iotest/storage/reader.hpp"

namespace iotest::storage {

// The storage settings as given: the back-end and its namespaced options.
struct StorageOptions {
  std::string storage;                        // empty: from the output path
  std::map<std::string, std::string> values;  // "posix.fsync" -> "chunk"
};

// One back-end option, `--KEY` on the command line (KEY = backend.name).
struct OptionSpec {
  std::string key;
  std::string help;
  bool flag = false;          // a switch (value "true" when given)
  std::string default_value;  // shown in --help; "" for none
};

struct BackendSpec {
  std::string name;
  std::string summary;
  std::vector<OptionSpec> options;
  // One output for the whole run, written by every streamer (one writer
  // each, a thread: its back-end calls MPI) rather than one per writer.
  bool shared = false;
  // Its writers of the shared output meet in MPI calls (phdf5's parallel
  // HDF5): one writer a streamer, a thread. Without it (msv4: an MSv4 a
  // writer in one processing set) a streamer may have several writers,
  // threads or forked processes.
  bool collective = false;
  // Where its outputs live and how they are claimed, published and
  // dropped (output/output_store.hpp); nullptr: it keeps nothing (null).
  const OutputStore* store = nullptr;
  // Whether an output named `path` is its own when --storage is not given
  // (hdf5: a .h5 name); nullptr: only when named. posix takes the rest.
  bool (*named_by)(const std::string& path) = nullptr;
  std::string names;  // those names, for --help: ".h5, .hdf5, .uvh5"
  // Its files split the observation by frequency, each every row of its
  // own channels (FileSplit: ms, as the SDP writes MeasurementSets), not
  // by row chunk.
  bool files_by_frequency = false;
  // Checks the options (UsageError naming the option) and makes a writer
  // back-end from them.
  std::unique_ptr<Backend> (*make)(const StorageOptions& options) = nullptr;
  // Whether an existing file is this back-end's output (by its signature),
  // and a reader for it; nothing for back-ends that keep nothing.
  bool (*recognises)(const std::string& path) = nullptr;
  std::unique_ptr<Reader> (*open)(const std::string& path, const StorageOptions& options) = nullptr;
  // Why it cannot store chunks of `time_chunk` rows of an observation of
  // `times` steps (msv4: a zarr chunk is a rectangle), for the UsageError
  // naming --time; empty, or nullptr, where it can.
  std::string (*time_chunk_problem)(index_t times, index_t time_chunk) = nullptr;
  // The store behind output `path` for the report (asking it, where it
  // answers with its name); nullptr: the outputs' paths say it all.
  StoreDescription (*describe)(const StorageOptions& options, const std::string& path) = nullptr;
};

// Every back-end, in the order --help lists them.
const std::vector<BackendSpec>& backends();
// Their names, "null, hdf5, posix, phdf5".
std::string backend_names();
// Which back-end an output's name gives, for --help: "none null, .h5,
// .hdf5, .uvh5 hdf5, ..., other posix".
std::string default_backends_text();

// The back-end for an output: --storage if given, else from the path:
// `null` without one, the back-end whose name it is (BackendSpec::named_by:
// hdf5 for .h5/.hdf5/.uvh5, ms for .ms), `posix` otherwise.
// (phdf5, a choice of how to write rather than a kind of file, is named.)
std::string backend_for(const StorageOptions& options, const std::string& path);
// Checks --storage and every option given (known, of the chosen back-end,
// a valid value): UsageError naming the option. Makes nothing.
void check_storage(const StorageOptions& options, const std::string& path);
// Before the options are checked (MPI's thread level): whether the
// back-end for `path` writes one output shared by all streamers
// (BackendSpec::shared), or splits its files by frequency
// (BackendSpec::files_by_frequency); false for an unknown one.
bool shares_output(const StorageOptions& options, const std::string& path);
bool splits_by_frequency(const StorageOptions& options, const std::string& path);

// An output's back-end, resolved once from the options as given (checked
// as check_storage does) and carried, with its options: what a run asks of
// it, and the writers it makes, so that no other place works it out again
// or builds a back-end to ask one property.
struct StorageChoice {
  const BackendSpec* spec = nullptr;  // as chosen
  StorageOptions options;             // as given (checked)
  std::string backend;                // its name: "null" without an output
  bool shared = false;              // one output for every streamer (BackendSpec::shared)
  bool collective = false;          // its writers meet in MPI calls (BackendSpec::collective)
  bool files_by_frequency = false;  // BackendSpec::files_by_frequency
  std::string durability;     // what its write times cover (Backend::durability)
  index_t held_chunks = 0;    // chunk buffers it holds besides a writer's queue
  index_t held_bytes = 0;     // and bytes besides (Backend::held_bytes)
  index_t row_chunk_bytes = 0;  // bytes it holds per row chunk (Backend::row_chunk_bytes)
  index_t value_bytes = 16;   // bytes it stores per visibility (Backend::stored_value_bytes)
  StoredForm stored_form = StoredForm::as_given;  // Backend::stored_form

  // A writer back-end, with the options as given.
  std::unique_ptr<Backend> make() const { return spec->make(options); }
  // Where its outputs live; nullptr where it keeps none.
  const OutputStore* store() const { return spec ? spec->store : nullptr; }
  // The store behind output `path`, for the report, where the back-end
  // describes one (BackendSpec::describe).
  std::optional<StoreDescription> describe(const std::string& path) const {
    if (!spec || !spec->describe || path.empty()) return std::nullopt;
    return spec->describe(options, path);
  }
};
StorageChoice resolve_storage(const StorageOptions& options, const std::string& path);
// A reader for an existing output, whichever back-end wrote it, with that
// back-end's options (--posix.direct); UsageError naming the file if none
// recognises it, or the option if it belongs to another back-end.
std::unique_ptr<Reader> open_reader(const std::string& path, const StorageOptions& options = {});

// Option values for back-ends' make(): `key`'s value, its default if not
// given; UsageError("--KEY") if it is not one of `choices`.
std::string option_choice(const StorageOptions& options, const std::string& key,
                          const std::string& fallback, const std::vector<std::string>& choices);
bool option_flag(const StorageOptions& options, const std::string& key);

// The back-ends' descriptions, each defined in its own file.
BackendSpec null_spec();   // null/null_backend.cpp
BackendSpec hdf5_spec();   // hdf5/hdf5_backend.cpp
BackendSpec posix_spec();  // posix/posix_backend.cpp
BackendSpec phdf5_spec();  // phdf5/phdf5_backend.cpp (with the Open MPI build of HDF5)
BackendSpec ms_spec();     // ms/ms_backend.cpp (casacore)
BackendSpec s3_spec();     // s3/s3_backend.cpp (libcurl)
BackendSpec msv4_spec();   // msv4/msv4_backend.cpp (its own zarr, on a folder or S3)

}  // namespace iotest::storage
