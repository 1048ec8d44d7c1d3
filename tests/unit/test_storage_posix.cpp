// The posix back-end: chunks (rewrites accumulated) read back exactly through
// the registry's reader, with O_DIRECT and per-chunk syncs too; its options
// checked; nothing left by an abort; incomplete files refused. Its format
// read from memory, as another back-end (S3) reads it, chunks in parts too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5/uvh5_reader.hpp"
#include "iotest/storage/output/file_claim.hpp"
#include "iotest/storage/posix/posix_format.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/storage/write_behind.hpp"

namespace iotest::storage {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the build folder: /tmp may be a tmpfs, which refuses
// O_DIRECT on older kernels.
fs::path scratch(const std::string& name) {
  const auto dir = fs::path(IOTEST_TEST_SCRATCH) / ("posix_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Whether the folder's file system takes O_DIRECT.
bool direct_supported(const fs::path& dir) {
  const auto probe = (dir / "probe").string();
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

// 351 baselines x 8 times in row chunks of 4; 12 channels in chunks of 8, so
// the second channel chunk runs past the edge. A chunk is 512 B (padded).
telescope::Observation edge_observation() {
  return telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/12/8", -40.0});
}
// Row chunks of 8, one chunk of 32 channels: a chunk is 4096 B, a whole slot.
telescope::Observation block_observation() {
  return telescope::make_observation({"vlaa", "-60:60/8/8", "1e9:1.1e9/32/32", 20.0});
}

// Every field set, doubles that are not short decimals, a seed beyond int64,
// an observation option left out.
Provenance full_provenance(const telescope::Observation& obs) {
  Provenance pv;
  pv.rec_set = "T05_";
  pv.pixel_lm = 1e-4 / 3;
  pv.source_count = 7;
  pv.seed = 0xfedcba9876543210ULL;
  pv.synthetic = true;
  pv.vis_units = "uncalib";  // a pattern's (not the default)
  pv.observation = {obs.vis_set, obs.time.text(), std::nullopt, obs.dec_deg};
  pv.margin = 12;
  pv.w_stack_step = 0.1 + 0.2;
  pv.stonewalled = true;
  return pv;
}

// A chunk's values, each naming its row and channel (plus `pass`), also past
// the observation's edges; dyadic, so sums are exact. Page-aligned, so whole
// slots go to O_DIRECT without a copy.
struct Chunk {
  std::unique_ptr<cplx, decltype(&std::free)> data{nullptr, &std::free};
  const cplx* get() const { return data.get(); }
};
Chunk chunk_values(const VisibilityLayout& l, const ChunkKey& key, double pass) {
  const auto bytes = static_cast<size_t>((l.chunk_bytes() + 4095) / 4096 * 4096);
  Chunk c;
  c.data.reset(static_cast<cplx*>(std::aligned_alloc(4096, bytes)));
  for (index_t i = 0; i < l.chunk_values(); ++i) {
    const index_t row = key.row_chunk * l.time_chunk + i / l.freq_chunk;
    const index_t chan = key.freq_chunk * l.freq_chunk + i % l.freq_chunk;
    c.data.get()[i] =
        cplx(static_cast<double>(row) + pass, 0.25 * static_cast<double>(chan) - pass);
  }
  return c;
}

// Writes four chunks and rewrites one with `options`, then reads everything
// back through open_reader: values, chunk map, provenance, written parts,
// frequencies and (u, v, w) as the hdf5 back-end gives them.
void round_trip(const StorageOptions& options, const telescope::Observation& obs,
                bool with_provenance, const fs::path& dir) {
  auto layout = layout_of(obs);
  if (with_provenance) layout.provenance = full_provenance(obs);
  const auto path = (dir / "out0.bin").string();
  const ChunkKey last{layout.row_chunks() - 1, layout.freq_chunks() - 1};
  const std::vector<ChunkKey> keys{{0, 0}, last, {5, layout.freq_chunks() - 1}, {3, 0}};
  const ChunkKey again = keys[2];
  const std::vector<WrittenPart> parts{{-1, 5, 0, 3}, {2, 9, 7, 8}};
  {
    auto backend = resolve_storage(options, path).make();
    ASSERT_EQ(backend->name(), "posix");
    FileClaim claim(path, nonce_of(layout));
    backend->open(claim.partial(), layout);
    for (const auto& key : keys)
      backend->write_chunk(key, chunk_values(layout, key, 0).get(), layout.chunk_values());
    backend->write_chunk(again, chunk_values(layout, again, 64).get(), layout.chunk_values());
    if (with_provenance) backend->set_written_parts(parts);
    backend->complete();
    EXPECT_TRUE(fs::exists(claim.partial()));
    EXPECT_FALSE(fs::exists(path));  // nothing under the final name before publishing
    publish(claim);
    EXPECT_FALSE(fs::exists(claim.partial()));
    EXPECT_EQ(backend->stats().chunks_written, 4);
    EXPECT_EQ(backend->stats().chunks_rewritten, 1);
  }
  ASSERT_TRUE(fs::exists(path));  // a completed output outlives its back-end
  const auto slot = (layout.chunk_bytes() + 4095) / 4096 * 4096;
  EXPECT_GT(static_cast<index_t>(fs::file_size(path)), 4096 + 4 * slot);

  const auto reader = open_reader(path);
  EXPECT_EQ(reader->backend(), "posix");
  EXPECT_EQ(reader->baselines(), obs.baseline_count());
  EXPECT_EQ(reader->times(), obs.time.steps);
  EXPECT_EQ(reader->channels(), obs.freq.steps);
  EXPECT_EQ(reader->chunk_rows(), layout.time_chunk);
  EXPECT_EQ(reader->chunk_channels(), layout.freq_chunk);
  ASSERT_EQ(reader->frequencies().size(), static_cast<size_t>(obs.freq.steps));
  for (index_t k = 0; k < obs.freq.steps; ++k)
    EXPECT_EQ(reader->frequencies()[static_cast<size_t>(k)], obs.freq.at(k));

  if (with_provenance) {
    ASSERT_TRUE(reader->provenance());
    const auto& got = *reader->provenance();
    const auto& want = *layout.provenance;
    EXPECT_EQ(got.rec_set, want.rec_set);
    EXPECT_EQ(got.pixel_lm, want.pixel_lm);
    EXPECT_EQ(got.source_count, want.source_count);
    EXPECT_EQ(got.seed, want.seed);
    EXPECT_EQ(got.synthetic, want.synthetic);
    EXPECT_EQ(got.vis_units, want.vis_units);
    EXPECT_EQ(got.observation.vis_set, want.observation.vis_set);
    EXPECT_EQ(got.observation.time, want.observation.time);
    EXPECT_FALSE(got.observation.freq.has_value());
    EXPECT_EQ(got.observation.dec_deg, want.observation.dec_deg);
    EXPECT_EQ(got.margin, want.margin);
    EXPECT_EQ(got.w_stack_step, want.w_stack_step);
    EXPECT_EQ(got.stonewalled, want.stonewalled);
    EXPECT_EQ(reader->written_parts(), parts);
  } else {
    EXPECT_FALSE(reader->provenance());
    EXPECT_TRUE(reader->written_parts().empty());
  }

  EXPECT_EQ(reader->chunks_present(), 4);
  const auto map = reader->chunk_map();
  ASSERT_EQ(static_cast<index_t>(map.size()), layout.chunk_count());
  for (index_t id = 0; id < layout.chunk_count(); ++id) {
    const bool written = std::any_of(keys.begin(), keys.end(), [&](const ChunkKey& k) {
      return k.row_chunk * layout.freq_chunks() + k.freq_chunk == id;
    });
    EXPECT_EQ(map[static_cast<size_t>(id)], written) << "chunk " << id;
  }

  // Every written chunk's values, the rewritten one summed; zero past the edges.
  std::vector<cplx> out(static_cast<size_t>(layout.chunk_values()));
  for (const auto& key : keys) {
    const auto first = chunk_values(layout, key, 0);
    const auto second = chunk_values(layout, key, 64);
    ASSERT_TRUE(reader->read_chunk(key, out.data()));
    for (index_t i = 0; i < layout.chunk_values(); ++i) {
      const index_t row = key.row_chunk * layout.time_chunk + i / layout.freq_chunk;
      const index_t chan = key.freq_chunk * layout.freq_chunk + i % layout.freq_chunk;
      const bool inside = row < layout.rows() && chan < layout.channels;
      cplx want = first.get()[i];
      if (key.row_chunk == again.row_chunk && key.freq_chunk == again.freq_chunk)
        want += second.get()[i];
      EXPECT_EQ(out[static_cast<size_t>(i)], inside ? want : cplx{}) << row << ", " << chan;
      if (inside) {
        EXPECT_TRUE(reader->chunk_present(row, chan));
        EXPECT_EQ(reader->visibility(row, chan), want) << row << ", " << chan;
      }
    }
  }
  // An absent chunk: not present, reads as zero, read_chunk leaves `out` alone.
  const index_t absent_row = 1 * layout.time_chunk;
  EXPECT_FALSE(reader->chunk_present(absent_row, 0));
  EXPECT_EQ(reader->visibility(absent_row, 0), cplx{});
  std::fill(out.begin(), out.end(), cplx(7, 7));
  EXPECT_FALSE(reader->read_chunk({1, 0}, out.data()));
  EXPECT_EQ(out[0], cplx(7, 7));

  // (u, v, w): as the hdf5 back-end writes them for the same observation.
  const auto h5 = (dir / "axes.h5").string();
  {
    auto backend = resolve_storage(StorageOptions{"hdf5", {}}, h5).make();
    FileClaim claim(h5, nonce_of(layout));
    backend->open(claim.partial(), layout);
    backend->complete();
    publish(claim);
  }
  const Uvh5Reader uvh5(h5);
  for (const index_t row :
       {index_t{0}, index_t{1}, index_t{7}, index_t{8}, index_t{1001}, layout.rows() - 1}) {
    const auto got = reader->uvw(row), want = uvh5.uvw(row);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(got[k], want[k], 1e-9) << "row " << row;
  }
  const auto far = reader->uvw(layout.rows() - 1);
  EXPECT_GT(std::abs(far[0]) + std::abs(far[1]) + std::abs(far[2]), 1.0);  // not all zero
}

// Both observations (a padded chunk at the edges, a chunk that is a whole
// slot), each in its own folder.
void round_trips(const StorageOptions& options, const fs::path& dir) {
  fs::create_directories(dir / "edge");
  fs::create_directories(dir / "block");
  round_trip(options, edge_observation(), true, dir / "edge");
  round_trip(options, block_observation(), false, dir / "block");
}

TEST(Posix, ChunksReadBackExactly) {
  const auto dir = scratch("round_trip");
  round_trips(StorageOptions{"posix", {}}, dir);
  round_trip(StorageOptions{}, block_observation(), true, dir);  // posix from the path
  fs::remove_all(dir);
}

TEST(Posix, ChunksReadBackExactlyWithDirectIo) {
  const auto dir = scratch("direct");
  if (!direct_supported(dir)) {
    fs::remove_all(dir);
    GTEST_SKIP() << dir << " refuses O_DIRECT";
  }
  round_trips(StorageOptions{"posix", {{"posix.direct", "true"}}}, dir);
  fs::remove_all(dir);
}

TEST(Posix, ChunksReadBackExactlyWithASyncPerChunk) {
  const auto dir = scratch("fsync_chunk");
  round_trips(StorageOptions{"posix", {{"posix.fsync", "chunk"}}}, dir);
  fs::remove_all(dir);
}

// Where the file system refuses O_DIRECT (a tmpfs before Linux 6.6), the
// error says so and names the file, and nothing is left.
TEST(Posix, RefusedDirectIoIsAClearError) {
  const fs::path shm = "/dev/shm";
  if (!fs::is_directory(shm)) GTEST_SKIP() << "no /dev/shm";
  const auto dir = shm / ("iotest_posix_direct_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  if (direct_supported(dir)) {
    fs::remove_all(dir);
    GTEST_SKIP() << "/dev/shm takes O_DIRECT here";
  }
  const auto obs = edge_observation();
  const auto path = (dir / "out.bin").string();
  auto backend = resolve_storage(StorageOptions{"posix", {{"posix.direct", "true"}}}, path).make();
  try {
    backend->open(partial_path(path, 0), layout_of(obs));
    ADD_FAILURE() << "O_DIRECT accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("O_DIRECT"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(partial_path(path, 0)), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(Posix, BadOptionValuesAreUsageErrors) {
  const auto option_of = [](const StorageOptions& o) -> std::string {
    try {
      resolve_storage(o, "out%d.bin").make();
    } catch (const UsageError& e) {
      return e.option();
    }
    return "accepted";
  };
  EXPECT_EQ(option_of({"posix", {{"posix.fsync", "sometimes"}}}), "--posix.fsync");
  EXPECT_EQ(option_of({"", {{"posix.direct", "maybe"}}}), "--posix.direct");
  EXPECT_EQ(option_of({"posix", {{"posix.fsync", "chunk"}, {"posix.direct", "1"}}}), "accepted");
  EXPECT_EQ(option_of({"posix", {{"posix.fsync", "close"}, {"posix.direct", "false"}}}),
            "accepted");
}

// The back-end by the output's name, and its options only with it.
TEST(Posix, ChosenByPathWithItsOwnOptions) {
  EXPECT_EQ(backend_for(StorageOptions{}, "out%d.bin"), "posix");
  EXPECT_EQ(backend_for(StorageOptions{}, "out.h5"), "hdf5");
  EXPECT_EQ(backend_for(StorageOptions{"posix", {}}, "out.h5"), "posix");
  for (const auto& storage : {std::string("hdf5"), std::string()}) {
    try {
      check_storage(StorageOptions{storage, {{"posix.direct", "true"}}}, "out.h5");
      ADD_FAILURE() << "--posix.direct accepted for hdf5";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), "--posix.direct");
    }
  }
  EXPECT_NO_THROW(check_storage(
      StorageOptions{"", {{"posix.direct", "true"}, {"posix.fsync", "chunk"}}}, "out%d.bin"));
  const auto& all = backends();
  const auto posix =
      std::find_if(all.begin(), all.end(), [](const BackendSpec& b) { return b.name == "posix"; });
  ASSERT_NE(posix, all.end());
  ASSERT_EQ(posix->options.size(), 2u);
  EXPECT_EQ(posix->options[0].key, "posix.direct");
  EXPECT_TRUE(posix->options[0].flag);
  EXPECT_EQ(posix->options[1].key, "posix.fsync");
  EXPECT_EQ(posix->options[1].default_value, "close");
}

// Aborted, or dropped without closing (a writer failing), an output leaves
// neither its partial file nor a final one.
TEST(Posix, AbortLeavesNoFile) {
  const auto obs = edge_observation();
  const auto layout = layout_of(obs);
  const auto dir = scratch("abort");
  const auto path = (dir / "out.bin").string();
  const auto data = chunk_values(layout, {0, 0}, 0);
  {
    auto backend = resolve_storage(StorageOptions{"posix", {}}, path).make();
    backend->open(partial_path(path, 0), layout);
    backend->write_chunk({0, 0}, data.get(), 32);
    EXPECT_TRUE(fs::exists(partial_path(path, 0)));
    EXPECT_FALSE(fs::exists(path));
    backend->abort();
    EXPECT_TRUE(fs::is_empty(dir));
    backend->abort();  // twice: nothing more
  }
  {
    auto backend = resolve_storage(StorageOptions{"posix", {}}, path).make();
    backend->open(partial_path(path, 0), layout);
    backend->write_chunk({0, 0}, data.get(), 32);
    backend->flush();
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// A file cut anywhere before the end of its footer, or one whose writer never
// closed it, is refused, naming the file.
TEST(Posix, IncompleteFileIsRefused) {
  const auto obs = edge_observation();
  const auto layout = layout_of(obs);
  const auto dir = scratch("incomplete");
  const auto path = (dir / "out.bin").string();
  const auto data = chunk_values(layout, {0, 0}, 0);
  {
    auto backend = resolve_storage(StorageOptions{"posix", {}}, path).make();
    FileClaim claim(path, nonce_of(layout));
    backend->open(claim.partial(), layout);
    backend->write_chunk({0, 0}, data.get(), 32);
    backend->write_chunk({9, 1}, data.get(), 32);
    backend->flush();
    fs::copy_file(claim.partial(), dir / "crashed.bin");  // as a crash would leave it
    backend->complete();
    publish(claim);
  }
  EXPECT_NO_THROW(open_reader(path));
  const auto size = static_cast<std::uintmax_t>(fs::file_size(path));
  const std::uintmax_t slots_end = 4096 + 2 * 4096;
  std::vector<std::string> refused{(dir / "crashed.bin").string()};
  const std::uintmax_t header = 4096, too_short = 10;
  for (const std::uintmax_t cut :
       {size - 1, size - 64, slots_end + 8, slots_end, header, too_short}) {
    const auto copy = (dir / ("cut" + std::to_string(cut) + ".bin")).string();
    fs::copy_file(path, copy);
    fs::resize_file(copy, cut);
    refused.push_back(copy);
  }
  for (const auto& file : refused) {
    try {
      open_reader(file);
      ADD_FAILURE() << file << " accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), file);
    }
  }
  fs::remove_all(dir);
}

// The format from memory, as an object store's reader has it.
class MemoryRanges final : public posix_format::ByteRanges {
 public:
  explicit MemoryRanges(std::vector<char> bytes) : bytes_(std::move(bytes)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(bytes_.size()); }
  bool read(void* out, std::int64_t bytes, std::int64_t offset) const override {
    if (offset < 0 || bytes < 0 || offset + bytes > size()) return false;
    std::memcpy(out, bytes_.data() + offset, static_cast<size_t>(bytes));
    return true;
  }

 private:
  std::vector<char> bytes_;
};

using ChunkValues = std::vector<cplx>;
ChunkValues values_of(const VisibilityLayout& l, const ChunkKey& key, double pass) {
  const auto c = chunk_values(l, key, pass);
  return ChunkValues(c.get(), c.get() + l.chunk_values());
}

// A complete output: the header, a slot per entry of `slots` (a chunk, or a
// part of one), the trailer.
std::vector<char> format_output(const VisibilityLayout& l,
                                const std::vector<std::pair<ChunkKey, ChunkValues>>& slots,
                                const std::vector<ChunkChecksum>& checksums, bool parts_in_slots) {
  const std::int64_t chunk_bytes = l.chunk_bytes();
  const std::int64_t slot_bytes = posix_format::slot_bytes_for(chunk_bytes);
  EXPECT_EQ(slot_bytes, 4096);
  const auto head = posix_format::header(chunk_bytes, slot_bytes);
  std::vector<char> out(head.begin(), head.end());
  std::vector<std::int64_t> index;
  for (const auto& [key, values] : slots) {
    index.push_back(key.row_chunk * l.freq_chunks() + key.freq_chunk);
    const auto at = out.size();
    out.resize(at + static_cast<size_t>(slot_bytes), '\0');
    std::memcpy(out.data() + at, values.data(), static_cast<size_t>(chunk_bytes));
  }
  const auto slots_end =
      posix_format::slot_offset(static_cast<std::int64_t>(slots.size()), slot_bytes);
  EXPECT_EQ(static_cast<std::int64_t>(out.size()), slots_end);
  const std::vector<WrittenPart> parts{{1, 2, 3, 4}};
  const auto tail =
      posix_format::trailer(l, index, chunk_bytes, slot_bytes, parts, checksums, parts_in_slots);
  EXPECT_EQ(std::string(tail.begin(), tail.end()).find("parts_in_slots") != std::string::npos,
            parts_in_slots);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

std::unique_ptr<Reader> memory_reader(std::vector<char> bytes) {
  return std::make_unique<posix_format::PosixFormatReader>(
      std::make_unique<MemoryRanges>(std::move(bytes)), "s3://bucket/out0.bin", "s3");
}

TEST(PosixFormat, ReadsChunksFromAnyByteRanges) {
  const auto obs = edge_observation();
  const auto layout = layout_of(obs);
  const ChunkKey a{7, 0}, b{2, 1};  // b runs past the last channel
  const std::vector<ChunkChecksum> sums{{14, 0xdeadbeef}, {5, 42}};
  const auto reader = memory_reader(format_output(
      layout, {{a, values_of(layout, a, 0)}, {b, values_of(layout, b, 0)}}, sums, false));
  EXPECT_EQ(reader->backend(), "s3");
  EXPECT_EQ(reader->baselines(), obs.baseline_count());
  EXPECT_EQ(reader->channels(), 12);
  EXPECT_EQ(reader->chunks_present(), 2);
  ASSERT_EQ(reader->checksums().size(), 2u);
  EXPECT_EQ(reader->checksums()[0].crc32, 0xdeadbeefu);
  EXPECT_EQ(reader->written_parts(), (std::vector<WrittenPart>{{1, 2, 3, 4}}));
  const auto stored = reader->stored_chunks();  // slot order
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].row_chunk, 7);
  EXPECT_EQ(stored[1].row_chunk, 2);
  EXPECT_EQ(stored[1].freq_chunk, 1);
  const auto map = reader->chunk_map();
  EXPECT_EQ(std::count(map.begin(), map.end(), true), 2);
  EXPECT_TRUE(map[7 * 2 + 0]);
  EXPECT_TRUE(map[2 * 2 + 1]);

  ChunkValues out(static_cast<size_t>(layout.chunk_values()));
  ASSERT_TRUE(reader->read_chunk(a, out.data()));
  EXPECT_EQ(out, values_of(layout, a, 0));
  ASSERT_TRUE(reader->read_chunk(b, out.data()));
  const auto want = values_of(layout, b, 0);
  EXPECT_EQ(out[0], want[0]);  // row 8, channel 8
  EXPECT_EQ(out[3], want[3]);  // channel 11, the last
  EXPECT_EQ(out[4], cplx{});   // channel 12: past the edge
  EXPECT_EQ(reader->visibility(8, 11), want[3]);
  EXPECT_EQ(reader->visibility(8 + 1, 9), want[8 + 1]);
  EXPECT_TRUE(reader->chunk_present(8, 11));
  EXPECT_FALSE(reader->chunk_present(0, 0));
  EXPECT_EQ(reader->visibility(0, 0), cplx{});
  EXPECT_FALSE(reader->read_chunk({0, 0}, out.data()));
}

// A chunk written as two parts (even values, odd values), each in a slot of
// its own, with another chunk between them: the chunk reads back whole.
TEST(PosixFormat, PartsInSlotsReadAsTheirXor) {
  const auto obs = edge_observation();
  const auto layout = layout_of(obs);
  const ChunkKey split{3, 0}, whole{6, 0};
  auto chunk = values_of(layout, split, 0);
  chunk[5] = cplx(-0.0, 2.5);  // in the odd part; the even part's +0.0 there
  ChunkValues even(chunk.size()), odd(chunk.size());
  for (size_t i = 0; i < chunk.size(); ++i) (i % 2 == 0 ? even : odd)[i] = chunk[i];
  const auto other = values_of(layout, whole, 0);
  const auto reader =
      memory_reader(format_output(layout, {{split, even}, {whole, other}, {split, odd}}, {}, true));

  EXPECT_EQ(reader->chunks_present(), 2);
  const auto stored = reader->stored_chunks();
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].row_chunk, 3);  // where its first part is
  EXPECT_EQ(stored[1].row_chunk, 6);
  const auto map = reader->chunk_map();
  EXPECT_EQ(std::count(map.begin(), map.end(), true), 2);

  ChunkValues out(chunk.size());
  ASSERT_TRUE(reader->read_chunk(split, out.data()));
  EXPECT_EQ(std::memcmp(out.data(), chunk.data(), chunk.size() * sizeof(cplx)), 0);
  EXPECT_TRUE(std::signbit(out[5].real()));  // -0.0, as a sum would not give
  EXPECT_EQ(out[4], cplx(12, 1));            // row 12, channel 4, from the even part
  EXPECT_EQ(out[9], cplx(13, 0.25));         // row 13, channel 1, from the odd part
  ASSERT_TRUE(reader->read_chunk(whole, out.data()));
  EXPECT_EQ(out, other);

  const auto v = reader->visibility(12, 5);  // chunk[5]
  EXPECT_EQ(v, cplx(0, 2.5));
  EXPECT_TRUE(std::signbit(v.real()));
  EXPECT_EQ(reader->visibility(13, 7), chunk[15]);
  EXPECT_TRUE(reader->chunk_present(14, 3));
}

// Without parts_in_slots (every posix file), a chunk in two slots is an error.
TEST(PosixFormat, AChunkListedTwiceIsRefusedWithoutPartsInSlots) {
  const auto obs = edge_observation();
  const auto layout = layout_of(obs);
  const ChunkKey split{3, 0};
  const auto chunk = values_of(layout, split, 0);
  try {
    memory_reader(format_output(layout, {{split, chunk}, {split, chunk}}, {}, false));
    ADD_FAILURE() << "a chunk listed twice accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.option(), "s3://bucket/out0.bin");
    EXPECT_NE(std::string(e.what()).find("lists a chunk twice"), std::string::npos) << e.what();
  }
}

TEST(PosixFormat, RecognisedByItsFirstBytes) {
  const auto head = posix_format::header(512, 4096);
  EXPECT_TRUE(posix_format::has_posix_magic(head.data(), head.size()));
  EXPECT_TRUE(posix_format::has_posix_magic(head.data(), 15));
  EXPECT_FALSE(posix_format::has_posix_magic(head.data(), 14));  // too few to tell
  EXPECT_FALSE(posix_format::has_posix_magic("\x89HDF\r\n\x1a\n and more", 16));
}

}  // namespace
}  // namespace iotest::storage

namespace iotest::storage {
namespace {

// Write-behind: a window is written back and out of the page cache once
// the next one has been handed to the device (what keeps a buffered
// writer's dirty pages bounded), while the window just written is cached.
TEST(WriteBehind, DropsWindowsHandedOnFromThePageCache) {
  const auto dir = scratch("write_behind");
  const auto path = (dir / "file").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  constexpr std::int64_t kWindow = 256 << 10;
  const std::vector<char> block(kWindow, 'x');
  WriteBehind behind(fd, kWindow);
  for (std::int64_t at = 0; at < 4 * kWindow; at += kWindow) {
    ASSERT_EQ(::pwrite(fd, block.data(), block.size(), at), kWindow);
    behind.wrote(kWindow);
  }
  behind.settle();  // the hand-overs run on the write-behind's own thread
  const long page = ::sysconf(_SC_PAGESIZE);
  void* map = ::mmap(nullptr, 4 * kWindow, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  std::vector<unsigned char> resident(static_cast<size_t>(4 * kWindow / page));
  ASSERT_EQ(::mincore(map, 4 * kWindow, resident.data()), 0);
  ::munmap(map, 4 * kWindow);
  ::close(fd);
  const auto pages = static_cast<size_t>(kWindow / page);
  const auto cached = [&](size_t window) {
    return std::count_if(resident.begin() + window * pages, resident.begin() + (window + 1) * pages,
                         [](unsigned char r) { return r & 1; });
  };
  if (cached(0) == static_cast<std::ptrdiff_t>(pages))
    GTEST_SKIP() << "the file system ignores POSIX_FADV_DONTNEED (tmpfs?)";
  EXPECT_EQ(cached(0), 0);
  EXPECT_EQ(cached(1), 0);
  EXPECT_EQ(cached(2), 0);
  EXPECT_EQ(cached(3), static_cast<std::ptrdiff_t>(pages));  // the last window, not yet handed on
}

}  // namespace
}  // namespace iotest::storage
