// The back-end registry: the list of back-ends, the default from the output
// path, the checks of --storage and the namespaced options.
#include "iotest/storage/registry.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "iotest/common/errors.hpp"
#include "iotest/storage/watched_reader.hpp"

namespace iotest::storage {
namespace {

const BackendSpec* find(std::string_view name) {
  for (const auto& b : backends())
    if (b.name == name) return &b;
  return nullptr;
}

// Options of another back-end than `name` would be silently ignored:
// refused, naming the option (`what`: the back-end in use, in words).
void check_owners(const StorageOptions& options, const std::string& name, const std::string& what) {
  for (const auto& [key, value] : options.values) {
    const auto owner = key.substr(0, key.find('.'));
    if (owner != name)
      throw UsageError("--" + key, fmt::format("applies to --storage={}, {}", owner, what));
  }
}

// The writer back-end --storage or the path names, its options checked
// but for their values (its make() checks those).
const BackendSpec& chosen(const StorageOptions& options, const std::string& path) {
  const std::string name = backend_for(options, path);
  const BackendSpec* spec = find(name);
  if (!spec)
    throw UsageError("--storage",
                     fmt::format("expected one of {}, got '{}'", backend_names(), name));
  if (name != "null" && path.empty())
    throw UsageError("--storage", fmt::format("--storage={} needs an output path", name));
  check_owners(options, name, "not " + name);
  if (spec->store && !path.empty() && !spec->store->holds(path))
    throw UsageError("OUTPUT", fmt::format("expected {} for --storage={}, got '{}'",
                                           spec->store->names(), name, path));
  return *spec;
}

}  // namespace

const std::vector<BackendSpec>& backends() {
  static const std::vector<BackendSpec> all {
    null_spec(), hdf5_spec(), posix_spec(), ms_spec(), msv4_spec(), s3_spec(),
#if IOTEST_HAVE_PHDF5
        phdf5_spec()
#endif
  };
  return all;
}

std::string backend_for(const StorageOptions& options, const std::string& path) {
  if (!options.storage.empty()) return options.storage;
  if (path.empty()) return "null";
  for (const auto& b : backends())
    if (b.named_by && b.named_by(path)) return b.name;
  return "posix";
}

const OutputStore& store_of(const std::string& path) {
  // The store of the back-end the name gives (an s3:// set named .zarr is
  // msv4's, whose store holds prefixes, not objects), else any that holds it.
  const BackendSpec* named = find(backend_for({}, path));
  if (named && named->store && named->store->holds(path)) return *named->store;
  for (const auto& b : backends())
    if (b.store && b.store->holds(path)) return *b.store;
  throw UsageError(path, "no storage back-end keeps outputs named so (" + backend_names() + ")");
}

std::string default_backends_text() {
  std::string s = "none null";
  for (const auto& b : backends())
    if (b.named_by) s += ", " + b.names + " " + b.name;
  return s + ", other posix";
}

std::string backend_names() {
  std::string s;
  for (const auto& b : backends()) s += (s.empty() ? "" : ", ") + b.name;
  return s;
}

void check_storage(const StorageOptions& options, const std::string& path) {
  chosen(options, path).make(options);  // a writer made and dropped: its checks of the values
}

bool shares_output(const StorageOptions& options, const std::string& path) {
  const BackendSpec* spec = find(backend_for(options, path));
  return spec && spec->shared;
}

bool splits_by_frequency(const StorageOptions& options, const std::string& path) {
  const BackendSpec* spec = find(backend_for(options, path));
  return spec && spec->files_by_frequency;
}

StorageChoice resolve_storage(const StorageOptions& options, const std::string& path) {
  const BackendSpec& spec = chosen(options, path);
  const auto backend = spec.make(options);  // its checks of the values, and what it says of itself
  StorageChoice c;
  c.spec = &spec;
  c.options = options;
  c.backend = spec.name;
  c.shared = spec.shared;
  c.collective = spec.collective;
  c.files_by_frequency = spec.files_by_frequency;
  c.durability = backend->durability();
  c.held_chunks = backend->held_chunks();
  c.held_bytes = backend->held_bytes();
  c.row_chunk_bytes = backend->row_chunk_bytes();
  c.value_bytes = backend->stored_value_bytes();
  c.stored_form = backend->stored_form();
  return c;
}

std::unique_ptr<Reader> open_reader(const std::string& path, const StorageOptions& options) {
  // Opening reads too (a header, a table's description): watched as the
  // reads after it are (watched_reader.hpp).
  const WatchedCall call(StorageStep::opening, path);
  if (!store_of(path).exists(path)) throw UsageError(path, "cannot open: no such file");
  for (const auto& b : backends())
    if (b.recognises && b.recognises(path)) {
      check_owners(options, b.name, fmt::format("but {} is {}'s output", path, b.name));
      return std::make_unique<WatchedReader>(b.open(path, options), path);
    }
  throw UsageError(path, "not an output of iotest's storage back-ends (" + backend_names() + ")");
}

std::uint32_t Reader::chunk_checksum(const ChunkKey&, const cplx* chunk) const {
  return chunk_crc32(chunk, chunk_rows() * chunk_channels() * static_cast<index_t>(sizeof(cplx)));
}

std::vector<ChunkKey> Reader::stored_chunks() const {
  const auto map = chunk_map();
  std::vector<ChunkKey> keys;
  for (index_t i = 0; i < static_cast<index_t>(map.size()); ++i)
    if (map[static_cast<size_t>(i)]) keys.push_back({i / channel_chunks(), i % channel_chunks()});
  return keys;
}

std::string option_choice(const StorageOptions& options, const std::string& key,
                          const std::string& fallback, const std::vector<std::string>& choices) {
  const auto it = options.values.find(key);
  const std::string value = it == options.values.end() ? fallback : it->second;
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    std::string expected;
    for (const auto& c : choices) expected += (expected.empty() ? "" : " or ") + c;
    throw UsageError("--" + key, fmt::format("expected {}, got '{}'", expected, value));
  }
  return value;
}

bool option_flag(const StorageOptions& options, const std::string& key) {
  const auto it = options.values.find(key);
  if (it == options.values.end()) return false;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  throw UsageError("--" + key, fmt::format("expected true or false, got '{}'", it->second));
}

}  // namespace iotest::storage
