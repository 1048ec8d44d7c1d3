#include "iotest/storage/msv4/msv4_layout.hpp"

#include <fmt/format.h>

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
  if (times % time_chunk == 0 || time_chunk % times == 0) return {};
  return fmt::format(
      "--storage=msv4 stores an iotest chunk as a zarr chunk of whole baselines' time ranges: "
      "expected a time chunk that divides the {} time steps or is a multiple of them, got {}",
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
  g.time_chunk = layout.time_chunk;
  g.chunk_channels = layout.freq_chunk;
  if (layout.times % layout.time_chunk == 0) {
    g.chunk_times = layout.time_chunk;
    g.chunk_baselines = 1;
  } else {
    g.chunk_times = layout.times;
    g.chunk_baselines = layout.time_chunk / layout.times;
  }
  return g;
}

std::array<index_t, 4> Msv4Grid::chunk_of(const ChunkKey& key) const {
  const index_t f = key.freq_chunk - first_freq_chunk;
  if (chunk_baselines > 1) return {0, key.row_chunk, f, 0};
  const index_t first_row = key.row_chunk * time_chunk;
  return {(first_row % times) / chunk_times, first_row / times, f, 0};
}

ChunkKey Msv4Grid::key_of(index_t time_chunk_index, index_t baseline_chunk_index,
                          index_t freq_chunk_index) const {
  const index_t fc = freq_chunk_index + first_freq_chunk;
  if (chunk_baselines > 1) return {baseline_chunk_index, fc};
  const index_t first_row = baseline_chunk_index * times + time_chunk_index * chunk_times;
  return {first_row / time_chunk, fc};
}

std::string chunk_key(const std::string& array, const std::array<index_t, 4>& index) {
  return fmt::format("{}/c/{}/{}/{}/{}", array, index[0], index[1], index[2], index[3]);
}

void reorder_rows(const Msv4Grid& grid, const void* from, void* to, std::size_t bytes_per_value,
                  bool to_zarr) {
  const std::size_t row_bytes = static_cast<std::size_t>(grid.chunk_channels) * bytes_per_value;
  const auto* in = static_cast<const std::byte*>(from);
  auto* out = static_cast<std::byte*>(to);
  for (index_t b = 0; b < grid.chunk_baselines; ++b)
    for (index_t t = 0; t < grid.chunk_times; ++t) {
      const index_t iotest_row = b * grid.chunk_times + t;
      const index_t zarr_row = t * grid.chunk_baselines + b;
      const index_t src = to_zarr ? iotest_row : zarr_row, dst = to_zarr ? zarr_row : iotest_row;
      std::memcpy(out + static_cast<std::size_t>(dst) * row_bytes,
                  in + static_cast<std::size_t>(src) * row_bytes, row_bytes);
    }
}

}  // namespace iotest::storage::msv4
