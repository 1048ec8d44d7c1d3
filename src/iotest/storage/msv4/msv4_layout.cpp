#include "iotest/storage/msv4/msv4_layout.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <stdexcept>

namespace iotest::storage::msv4 {

std::string set_stem(const std::string& path) {
  std::string name = path;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  const auto slash = name.rfind('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  // A folder being written: NAME.run-<nonce>.partial (file_claim.hpp).
  if (name.ends_with(".partial")) {
    const auto run = name.rfind(".run-");
    if (run != std::string::npos) name.resize(run);
  }
  for (const char* suffix : {".ps.zarr", ".zarr"})
    if (name.ends_with(suffix) && name.size() > std::strlen(suffix)) {
      name.resize(name.size() - std::strlen(suffix));
      break;
    }
  return name.empty() ? std::string("vis") : name;
}

std::string msv4_name(const std::string& stem, index_t file) {
  return fmt::format("{}_{}", stem, file);
}

std::string time_chunk_problem(index_t times, index_t time_chunk) {
  if (times % time_chunk == 0) return {};
  return fmt::format(
      "--storage=msv4 stores an iotest chunk as a zarr chunk of one baseline's time range: "
      "expected a time chunk that divides the {} time steps, got {}",
      times, time_chunk);
}

Msv4Grid grid_of(const VisibilityLayout& layout) {
  const auto problem = time_chunk_problem(layout.times, layout.time_chunk);
  if (!problem.empty()) throw std::logic_error(problem);
  Msv4Grid g;
  g.times = layout.times;
  g.baselines = layout.baselines;
  g.channels = layout.file_channels();
  g.first_freq_chunk = layout.first_freq_chunk;
  g.chunk_times = layout.time_chunk;
  g.chunk_channels = layout.freq_chunk;
  return g;
}

// A row chunk is one baseline's time chunk: row = baseline * times + time.
std::array<index_t, 4> Msv4Grid::chunk_of(const ChunkKey& key) const {
  const index_t first_row = key.row_chunk * chunk_times;
  return {(first_row % times) / chunk_times, first_row / times, key.freq_chunk - first_freq_chunk,
          0};
}

ChunkKey Msv4Grid::key_of(index_t time_chunk_index, index_t baseline,
                          index_t freq_chunk_index) const {
  const index_t first_row = baseline * times + time_chunk_index * chunk_times;
  return {first_row / chunk_times, freq_chunk_index + first_freq_chunk};
}

std::string chunk_key(const std::string& array, const std::vector<index_t>& index) {
  std::string key = array + "/c";
  for (const index_t i : index) key += kChunkSeparator + std::to_string(i);
  return key;
}

std::string chunk_key(const std::string& array, const std::array<index_t, 4>& index) {
  return chunk_key(array, std::vector<index_t>(index.begin(), index.end()));
}

bool parse_chunk_key(std::string_view name, std::array<index_t, 4>& index) {
  if (!name.starts_with("c")) return false;
  name.remove_prefix(1);
  for (auto& i : index) {
    if (name.empty() || name.front() != kChunkSeparator) return false;
    name.remove_prefix(1);
    const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), i);
    if (error != std::errc{} || end == name.data() || i < 0) return false;
    name.remove_prefix(static_cast<std::size_t>(end - name.data()));
  }
  return name.empty();
}

}  // namespace iotest::storage::msv4
