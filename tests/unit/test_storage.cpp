// Storage back-ends: the null back-end counts chunks, unknown names are usage
// errors, and the HDF5 back-end leaves nothing behind when aborted.
#include <fitsio.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/chunks/chunk_assembler.hpp"
#include "iotest/commands/verify.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/config/rec_set.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/image/image_file.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/hdf5/uvh5_reader.hpp"
#include "iotest/storage/output/file_claim.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/telescope/geodesy.hpp"

namespace iotest::storage {
namespace {

using chunks::ChunkAssembler;
using chunks::ChunkCover;
using chunks::MakeChunk;
using chunks::set_present;
using image::claim_image_path;
using image::facet_block;
using image::facet_region;
using image::ImageDescription;
using image::ImageWriter;
using image::is_fits_path;

Provenance sky_provenance(const std::string& rec_set, double pixel_lm, index_t sources,
                          std::uint64_t seed) {
  Provenance pv;
  pv.rec_set = rec_set;
  pv.pixel_lm = pixel_lm;
  pv.source_count = sources;
  pv.seed = seed;
  return pv;
}

telescope::Observation small_observation() {
  return telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/16/8", -40.0});
}

// 351 baselines x 8 times in chunks of 4, 16 channels in chunks of 8.
TEST(Storage, NullBackendCountsChunksAndRewrites) {
  const auto obs = small_observation();
  auto backend = resolve_storage(StorageOptions{}, "").make();
  backend->open("", layout_of(obs));
  const std::vector<cplx> data(32);
  backend->write_chunk({0, 0}, data.data(), 5);
  backend->write_chunk({0, 0}, data.data(), 3);  // the same chunk again: a rewrite
  backend->write_chunk({701, 1}, data.data(), 32);
  backend->complete();
  EXPECT_EQ(backend->stats().chunk_writes, 3);
  EXPECT_EQ(backend->stats().chunks_written, 2);
  EXPECT_EQ(backend->stats().chunks_rewritten, 1);
  EXPECT_EQ(backend->stats().bytes, 3 * 32 * 16);
  EXPECT_EQ(backend->stats().visibilities, 40);
  EXPECT_THROW(backend->write_chunk({702, 0}, data.data(), 1), std::logic_error);
}

// Runs of one row chunk come out as whole chunks, each value in its place;
// moving to the next row chunk emits the previous one.
TEST(Storage, ChunkAssemblerPlacesRunsInChunks) {
  const auto obs = small_observation();
  const auto layout = layout_of(obs);
  ChunkAssembler chunks(layout);
  std::vector<std::pair<ChunkKey, std::vector<cplx>>> out;
  std::vector<PresenceWord> bits;  // the emitted chunks' presence words (one each: 32 values)
  const auto emit = [&](const ChunkKey& key, const cplx* data, index_t count,
                        const PresenceWord* present) {
    out.emplace_back(key, std::vector<cplx>(data, data + 32));
    EXPECT_GT(count, 0);
    ASSERT_NE(present, nullptr);
    bits.push_back(present[0]);
  };
  const std::vector<cplx> vis = {{1, 0}, {2, 0}, {3, 0}};
  chunks.add(9, 6, 2, vis.data(), emit);   // row 9 (baseline 1, time 1), channels 6-7
  chunks.add(10, 8, 3, vis.data(), emit);  // row 10, channels 8-10: frequency chunk 1
  EXPECT_TRUE(out.empty());
  chunks.add(12, 0, 1, vis.data(), emit);  // row chunk 3: chunk (2, *) are done
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first.row_chunk, 2);
  EXPECT_EQ(out[0].first.freq_chunk, 0);
  EXPECT_EQ(out[0].second[1 * 8 + 6], cplx(1, 0));
  EXPECT_EQ(out[0].second[1 * 8 + 7], cplx(2, 0));
  EXPECT_EQ(out[1].first.freq_chunk, 1);
  EXPECT_EQ(out[1].second[2 * 8 + 2], cplx(3, 0));
  EXPECT_EQ(out[1].second[0], cplx(0, 0));
  // Exactly the values the runs placed: row 1 channels 6-7, row 2 channels 0-2.
  EXPECT_EQ(bits[0], (PresenceWord{1} << (1 * 8 + 6)) | (PresenceWord{1} << (1 * 8 + 7)));
  EXPECT_EQ(bits[1], PresenceWord{7} << (2 * 8));
  chunks.flush(emit);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].first.row_chunk, 3);
  EXPECT_THROW(chunks.add(9, 7, 2, vis.data(), emit), std::logic_error);  // crosses channel 8
}

// The storage-only mode's twin of degrid_to_chunks: a subgrid's runs (some
// baselines, every other time step, two channel ranges) cut into tasks as
// the streamer cuts them; the chunks carry exactly the runs' visibilities,
// each once, with the pattern's values, and zeros elsewhere.
TEST(Storage, SynthesizedChunksCoverTheRunsWithThePattern) {
  const auto obs = small_observation();  // 8 times in chunks of 4, 16 channels in chunks of 8
  const auto layout = layout_of(obs);
  std::vector<binning::VisRun> runs;
  for (int b : {1, 2, 40})
    for (int t = 0; t < 8; t += 2) {
      runs.push_back({b, t, 2, 8, 0});
      runs.push_back({b, t, 8, 13, 0});
    }
  degrid::sort_for_storage(runs);
  std::map<std::pair<index_t, index_t>, std::vector<cplx>> chunks;  // summed over emissions
  index_t emitted = 0;
  std::map<std::pair<index_t, index_t>, PresenceWord> present_in;  // OR over emissions
  const auto emit = [&](const ChunkKey& key, index_t count, const PresenceWord* present,
                        const MakeChunk& make) {
    std::vector<cplx> data(static_cast<size_t>(layout.chunk_values()), cplx(-1, -1));
    const std::uint32_t crc = make(data.data(), StoredForm::as_given);
    EXPECT_EQ(crc, chunk_crc32(data.data(), layout.chunk_bytes()));
    auto& sum = chunks[{key.row_chunk, key.freq_chunk}];
    sum.resize(static_cast<size_t>(layout.chunk_values()));
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += data[i];
    auto& bits = present_in[{key.row_chunk, key.freq_chunk}];
    EXPECT_EQ(bits & present[0], 0U) << "a value emitted twice";
    bits |= present[0];
    emitted += count;
  };
  ChunkCover cover(layout);
  index_t returned = 0;
  const auto run_row_chunk = [&](size_t i) { return (runs[i].baseline * 8 + runs[i].time) / 4; };
  const auto run_count = [&](size_t i) { return runs[i].count(); };
  for (const auto& [first, last] :
       binning::cut_at_row_chunks(runs.size(), run_row_chunk, run_count, 1, 1 << 22))
    returned += degrid::synthesize_to_chunks(77, runs.data() + first, runs.data() + last, cover,
                                             emit);
  index_t expected = 0;
  for (const auto& r : runs) expected += r.count();
  EXPECT_EQ(emitted, expected);
  EXPECT_EQ(returned, expected);
  EXPECT_EQ(chunks.size(), 3u * 2 * 2);  // 3 baselines x 2 row chunks x 2 frequency chunks
  index_t nonzero = 0;
  for (const auto& [key, values] : chunks)
    for (index_t i = 0; i < layout.chunk_values(); ++i) {
      const index_t row = key.first * 4 + i / 8, chan = key.second * 8 + i % 8;
      const index_t b = row / 8, t = row % 8;
      const bool covered = t % 2 == 0 && chan >= 2 && chan < 13;
      const cplx want = covered ? degrid::synthetic_visibility(b, t, chan, 77) : cplx{};
      EXPECT_EQ(values[static_cast<size_t>(i)], want) << "row " << row << " channel " << chan;
      EXPECT_EQ(present(&present_in[key], i), covered) << "row " << row << " channel " << chan;
      nonzero += covered;
    }
  EXPECT_EQ(nonzero, expected);
  EXPECT_EQ(degrid::synthetic_visibility(2, 3, 5, 0), cplx(3, 3 * 1048576 + 5));
  // The run's nonce in every value: exact up to the largest nonce.
  EXPECT_EQ(degrid::synthetic_visibility(2, 3, 5, 77), cplx(77 * 1048576 + 3, 3 * 1048576 + 5));
  const cplx top = degrid::synthetic_visibility((1 << 20) - 2, 0, 0, 0xffffffffu);
  EXPECT_EQ(top.real(), 4294967295.0 * 1048576 + (1 << 20) - 1);  // 2^52 - 1, exact
}

// A chunk of the pattern made in place is synthetic_visibility's, value
// for value, zero past the observation's edges (and, for a part, where its
// bit is clear), whatever the buffer held; its CRC-32, taken a block at a
// time as it is made, is chunk_crc32's of the whole chunk's bytes. Chunks
// inside and on the edges: 4 rows x 4096 channels (the last row chunk 3
// rows, the last frequency chunk 3904 channels; 64 KiB rows, a block each)
// and 16 rows x 100 channels (15 rows, the last chunk 5 channels; rows that
// start inside presence words, 11 rows a block). A whole chunk inside the
// edges in a MeasurementSet's stored form: the same values converted.
TEST(Storage, SynthesizedChunkIsThePatternWithItsChecksum) {
  for (const auto& [time_chunk, freq_chunk] : {std::pair<index_t, index_t>{4, 4096}, {16, 100}}) {
    VisibilityLayout layout;
    layout.baselines = 3, layout.times = 5;  // 15 rows
    layout.channels = freq_chunk == 100 ? 2005 : 8000;
    layout.time_chunk = time_chunk, layout.freq_chunk = freq_chunk;
    std::vector<cplx> values(static_cast<size_t>(layout.chunk_values()));
    std::vector<PresenceWord> bits(static_cast<size_t>(layout.presence_words()));
    for (size_t w = 0; w < bits.size(); ++w) bits[w] = 0x9e3779b97f4a7c15ULL * (w + 1);
    for (index_t rc = 0; rc < layout.row_chunks(); ++rc)
      for (index_t fc = 0; fc < layout.freq_chunks(); ++fc)
        for (const PresenceWord* present : {static_cast<const PresenceWord*>(nullptr),
                                            static_cast<const PresenceWord*>(bits.data())}) {
          std::fill(values.begin(), values.end(), cplx(-1, -1));  // what the slot held before
          const std::uint32_t crc =
              degrid::synthesize_chunk(layout, {rc, fc}, 4242, present, values.data());
          EXPECT_EQ(crc, chunk_crc32(values.data(), layout.chunk_bytes()));
          for (index_t i = 0; i < layout.chunk_values(); ++i) {
            const index_t row = rc * time_chunk + i / freq_chunk;
            const index_t chan = fc * freq_chunk + i % freq_chunk;
            const bool inside = row < layout.rows() && chan < layout.channels &&
                                (!present || storage::present(present, i));
            const cplx want = inside ? degrid::synthetic_visibility(row / layout.times,
                                                                    row % layout.times, chan, 4242)
                                     : cplx{};
            ASSERT_EQ(values[static_cast<size_t>(i)], want) << "row " << row << " channel " << chan;
          }
          // As a MeasurementSet stores it (asked for whole chunks inside the
          // edges alone): the same values converted, the CRC-32 of those bytes.
          if (present || !inside_edges(layout, {rc, fc})) continue;
          std::vector<std::complex<float>> cells(values.size(), {-1, -1}), want(values.size());
          to_single_conjugated(values.data(), layout.chunk_values(), want.data());
          EXPECT_EQ(degrid::synthesize_chunk(layout, {rc, fc}, 4242, present, cells.data(),
                                             StoredForm::single_conjugated),
                    chunk_crc32(want.data(), layout.chunk_values() * 8));
          ASSERT_EQ(cells, want);
        }
  }
  // Summed in pieces, the CRC-32 is the one of the whole (zlib's crc32(crc, ...)).
  const unsigned char check[] = "123456789";
  EXPECT_EQ(chunk_crc32(check + 4, 5, chunk_crc32(check, 4)), 0xCBF43926U);
}

// Presence bits are set a word at a time: the same bits as one at a time,
// for ranges within a word, across words and to a word's ends.
TEST(Storage, PresenceRangesSetExactlyTheirBits) {
  for (index_t begin = 0; begin < 200; begin += 7)
    for (index_t end = begin; end <= 256; end += 5) {
      std::vector<PresenceWord> fast(4, 0), slow(4, 0);
      set_present(fast.data(), begin, end);
      for (index_t v = begin; v < end; ++v) slow[v / 64] |= PresenceWord{1} << (v % 64);
      ASSERT_EQ(fast, slow) << begin << " " << end;
    }
  std::vector<PresenceWord> bits(2, 0);
  set_present(bits.data(), 0, 128);
  EXPECT_EQ(bits, std::vector<PresenceWord>(2, ~PresenceWord{0}));
}

TEST(Storage, DegridTasksKeepWholeRowChunksAndBoundTheirVisibilities) {
  // Baselines 0..9, 8 dumps in row chunks of 4, 10 channels per run.
  std::vector<binning::VisRun> runs;
  for (int b = 0; b < 10; ++b)
    for (int t = 0; t < 8; ++t) runs.push_back({b, t, 0, 10, 0});
  const auto row_chunk = [&](size_t i) { return (runs[i].baseline * 8 + runs[i].time) / 4; };
  const auto check = [&](index_t per_task, index_t max_vis, size_t expected_tasks) {
    const auto tasks = binning::cut_at_row_chunks(
        runs.size(), row_chunk, [&](size_t i) { return runs[i].count(); }, per_task, max_vis);
    EXPECT_EQ(tasks.size(), expected_tasks) << per_task << " row chunks, " << max_vis << " vis";
    size_t next = 0;
    for (const auto& [first, last] : tasks) {
      EXPECT_EQ(first, next);  // contiguous, covering every run
      EXPECT_TRUE(first == 0 || row_chunk(first) != row_chunk(first - 1));  // whole row chunks
      index_t vis = 0;
      for (size_t i = first; i < last; ++i) vis += runs[i].count();
      // It stops once it reaches max_vis: at most one row chunk (40) beyond.
      EXPECT_LT(vis, max_vis + 40);
      next = last;
    }
    EXPECT_EQ(next, runs.size());
  };
  check(1, 1 << 20, 20);  // 20 row chunks, one per task
  check(8, 1 << 20, 3);   // 8 + 8 + 4
  check(8, 100, 7);       // 40 visibilities per row chunk: 3 row chunks reach 100 (120)
  check(8, 1, 20);        // a row chunk alone is never split
}

TEST(Storage, UnknownBackendIsAUsageError) {
  EXPECT_THROW(resolve_storage(StorageOptions{"tape", {}}, "out.h5").make(), UsageError);
}

TEST(Storage, AbortedHdf5OutputLeavesNoFile) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_abort";
  std::filesystem::create_directories(dir);
  {
    auto backend = resolve_storage(StorageOptions{"hdf5", {}}, "out.h5").make();
    backend->open(partial_path((dir / "vis.h5").string(), 0), layout_of(obs));
    const std::vector<cplx> data(32, cplx(1, 2));
    backend->write_chunk({0, 0}, data.data(), 32);
    EXPECT_TRUE(std::filesystem::exists(partial_path((dir / "vis.h5").string(), 0)));
    backend->abort();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST(Storage, VerifyFindsMissingChunks) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_missing";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "vis.h5").string();
  {
    auto backend = resolve_storage(StorageOptions{"hdf5", {}}, "out.h5").make();
    auto layout = layout_of(obs);
    layout.provenance = sky_provenance("T05_", 1e-5, 3, 1);
    FileClaim claim(path, nonce_of(layout));
    backend->open(claim.partial(), layout);
    const std::vector<cplx> data(32, cplx(1, 2));
    backend->write_chunk({0, 0}, data.data(), 32);  // one chunk of 351 x 2 x 2
    backend->complete();
    publish(claim);
  }
  commands::VerifyOptions o;
  o.files = {path};
  const auto r = commands::verify(o);
  EXPECT_FALSE(r.verification->passed);
  EXPECT_EQ(r.verification->chunks_present, 1);
  EXPECT_EQ(r.verification->chunks_expected, 351 * 2 * 2);
  EXPECT_NE(r.verification->reason.find("chunks missing"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Writes the chunks `keys` (values: `value(key)`, 32 per chunk) to a UVH5 file.
template <typename Value>
void write_file(const std::string& path, const telescope::Observation& obs, const Provenance& pv,
                const std::vector<ChunkKey>& keys, Value value) {
  auto backend = resolve_storage(StorageOptions{"hdf5", {}}, "out.h5").make();
  auto layout = layout_of(obs);
  layout.provenance = pv;
  FileClaim claim(path, nonce_of(layout));
  backend->open(claim.partial(), layout);
  for (const auto& key : keys) {
    const std::vector<cplx> data = value(key);
    backend->write_chunk(key, data.data(), 32);
  }
  backend->complete();
  publish(claim);
}

// One output set of several files: the chunks present are the union over the
// files; files of another shape or sky are not part of it.
TEST(Storage, VerifyJoinsTheChunksOfSeveralFiles) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_set";
  std::filesystem::create_directories(dir);
  const auto a = (dir / "out0.h5").string(), b = (dir / "out1.h5").string();
  const auto pv = sky_provenance("T05_", 1e-5, 3, 1);
  const auto ones = [](const ChunkKey&) { return std::vector<cplx>(32, cplx(1, 2)); };
  write_file(a, obs, pv, {{0, 0}, {1, 0}}, ones);
  write_file(b, obs, pv, {{1, 0}, {2, 1}}, ones);
  commands::VerifyOptions o;
  o.files = {a, b};
  const auto r = commands::verify(o);
  EXPECT_FALSE(r.verification->passed);
  EXPECT_EQ(r.verification->files, o.files);
  EXPECT_EQ(r.verification->chunks_present, 3);
  EXPECT_EQ(r.verification->chunks_expected, 351 * 2 * 2);
  EXPECT_NE(r.verification->reason.find("1401 of 1404 chunks missing"), std::string::npos)
      << r.verification->reason;
  EXPECT_NE(r.verification->reason.find("first missing: baseline-time row 0, channel 8"),
            std::string::npos)
      << r.verification->reason;

  // Another --time, another seed, the same file twice: not one output set.
  const auto other_time = (dir / "time.h5").string(), other_seed = (dir / "seed.h5").string();
  write_file(other_time,
             telescope::make_observation({"vlaa", "-60:60/4/4", "1e9:1.1e9/16/8", -40.0}), pv,
             {{2, 1}}, ones);
  write_file(other_seed, obs, sky_provenance("T05_", 1e-5, 3, 2), {{2, 1}}, ones);
  for (const auto& bad : {other_time, other_seed, a}) {
    o.files = {a, bad};
    try {
      commands::verify(o);
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), bad);
      if (bad != a) {
        EXPECT_NE(std::string(e.what()).find("does not match " + a), std::string::npos) << e.what();
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// A sky's file from before visibilities were in Jy (vis_units "uncalib",
// values 1/N^2 of today's) is refused with one line naming it, alone or
// after a file of today; a synthetic set has no unit and is read.
TEST(Storage, VerifyRefusesSkyFilesFromBeforeJansky) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_units";
  std::filesystem::create_directories(dir);
  const auto today = (dir / "today.h5").string(), before = (dir / "before.h5").string();
  const auto ones = [](const ChunkKey&) { return std::vector<cplx>(32, cplx(1, 2)); };
  auto pv = sky_provenance("T05_", 1e-5, 3, 1);
  write_file(today, obs, pv, {{0, 0}}, ones);
  EXPECT_EQ(Uvh5Reader(today).provenance()->vis_units, "Jy");
  pv.vis_units = "uncalib";
  write_file(before, obs, pv, {{1, 0}}, ones);
  commands::VerifyOptions o;
  for (const auto& files : {std::vector{before}, std::vector{today, before}}) {
    o.files = files;
    try {
      commands::verify(o);
      ADD_FAILURE() << "a file in the old scale accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), before);
      EXPECT_NE(std::string(e.what()).find("\"uncalib\", not Jy"), std::string::npos) << e.what();
    }
  }
  pv.synthetic = true;
  const auto pattern = (dir / "pattern.h5").string();
  write_file(pattern, obs, pv, {{0, 0}}, ones);
  o.files = {pattern};
  EXPECT_NO_THROW(commands::verify(o));
  std::filesystem::remove_all(dir);
}

// What is compared is the sum over the files holding a chunk: a set whose
// shared chunks are split between files passes, and fails without one file
// (chunks missing) or with one file's chunks counted twice.
TEST(Storage, VerifyComparesTheSumOverFiles) {
  const auto obs = small_observation();
  const auto p = config::resolve_rec_set("T05_");
  const auto pv = sky_provenance("T05_", binning::grid_geometry(p, obs).pixel_lm, 3, 1);
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_sum";
  std::filesystem::create_directories(dir);
  const auto axes = (dir / "axes.h5").string();
  write_file(axes, obs, pv, {}, [](const ChunkKey&) { return std::vector<cplx>(); });
  const Uvh5Reader reader(axes);
  const auto sources = sky::random_sources(pv.source_count, p.used_size, pv.seed);
  // Chunk values from the direct transform; `part` 0: all, 1: even entries, 2: odd ones.
  const auto chunk = [&](const ChunkKey& key, int part) {
    std::vector<cplx> out(32);
    for (index_t i = 0; i < 32; ++i) {
      if (part != 0 && i % 2 != part - 1) continue;
      const index_t row = key.row_chunk * 4 + i / 8, chan = key.freq_chunk * 8 + i % 8;
      const double scale =
          reader.frequencies()[static_cast<size_t>(chan)] / telescope::kSpeedOfLight;
      const auto b = reader.uvw(row);
      out[static_cast<size_t>(i)] =
          sky::direct_visibility(sources, pv.pixel_lm, scale * b[0], scale * b[1], scale * b[2]);
    }
    return out;
  };
  // Row chunks 0 mod 3 in file A only, 1 mod 3 in B only, 2 mod 3 split between both.
  std::vector<ChunkKey> in_a, in_b;
  for (index_t rc = 0; rc < 702; ++rc)
    for (index_t fc = 0; fc < 2; ++fc) {
      if (rc % 3 != 1) in_a.push_back({rc, fc});
      if (rc % 3 != 0) in_b.push_back({rc, fc});
    }
  const auto a = (dir / "out0.h5").string(), b = (dir / "out1.h5").string();
  write_file(a, obs, pv, in_a,
             [&](const ChunkKey& k) { return chunk(k, k.row_chunk % 3 ? 1 : 0); });
  write_file(b, obs, pv, in_b,
             [&](const ChunkKey& k) { return chunk(k, k.row_chunk % 3 == 2 ? 2 : 0); });

  commands::VerifyOptions o;
  o.files = {a, b};
  auto r = commands::verify(o);
  EXPECT_TRUE(r.verification->passed) << r.verification->reason;
  EXPECT_EQ(r.verification->chunks_present, 1404);
  EXPECT_EQ(r.verification->chunks_expected, 1404);
  EXPECT_LT(r.accuracy->vis_rmse, 1e-12);
  EXPECT_EQ(r.accuracy->vis_rmse_max, r.accuracy->vis_rmse);
  EXPECT_EQ(r.accuracy->vis_samples, 1000);

  o.files = {a};
  r = commands::verify(o);
  EXPECT_FALSE(r.verification->passed);
  EXPECT_EQ(r.verification->chunks_present, 936);
  EXPECT_NE(r.verification->reason.find("468 of 1404 chunks missing"), std::string::npos)
      << r.verification->reason;

  const auto b_copy = (dir / "out2.h5").string();
  std::filesystem::copy_file(b, b_copy);
  o.files = {a, b, b_copy};
  r = commands::verify(o);
  EXPECT_FALSE(r.verification->passed);
  EXPECT_EQ(r.verification->chunks_present, 1404);
  EXPECT_NE(r.verification->reason.find("direct transform"), std::string::npos)
      << r.verification->reason;
  std::filesystem::remove_all(dir);
}

// A synthetic set is checked against the pattern, exactly; it does not mix
// with files of a sky.
TEST(Storage, VerifyChecksASyntheticSetAgainstThePattern) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_synthetic";
  std::filesystem::create_directories(dir);
  const auto pattern = [](const ChunkKey& key) {
    std::vector<cplx> out(32);
    for (index_t i = 0; i < 32; ++i) {
      const index_t row = key.row_chunk * 4 + i / 8, chan = key.freq_chunk * 8 + i % 8;
      out[static_cast<size_t>(i)] = degrid::synthetic_visibility(row / 8, row % 8, chan, 0);
    }
    return out;
  };
  std::vector<ChunkKey> all;
  for (index_t rc = 0; rc < 702; ++rc)
    for (index_t fc = 0; fc < 2; ++fc) all.push_back({rc, fc});
  auto pv = sky_provenance("T05_", 1e-5, 0, 1);
  pv.synthetic = true;
  const auto good = (dir / "good.h5").string(), bad = (dir / "bad.h5").string(),
             sky = (dir / "sky.h5").string();
  write_file(good, obs, pv, all, pattern);
  write_file(bad, obs, pv, all, [&](const ChunkKey& k) {
    auto v = pattern(k);
    if (k.row_chunk == 5 && k.freq_chunk == 1)
      for (auto& x : v) x += cplx(0, 1e-6);  // off by far less than a sky's tolerance
    return v;
  });
  commands::VerifyOptions o;
  o.files = {good};
  auto r = commands::verify(o);
  EXPECT_TRUE(r.verification->passed) << r.verification->reason;
  EXPECT_TRUE(r.verification->synthetic);
  EXPECT_EQ(r.accuracy->vis_rmse, 0.0);
  o.files = {bad};
  o.samples = 1404;  // one visibility in every chunk
  r = commands::verify(o);
  EXPECT_FALSE(r.verification->passed);
  EXPECT_NE(r.verification->reason.find("1 of 1404 sampled visibilities differ from the synthetic"),
            std::string::npos)
      << r.verification->reason;

  write_file(sky, obs, sky_provenance("T05_", 1e-5, 0, 1), {{0, 0}}, pattern);
  o.files = {good, sky};
  try {
    commands::verify(o);
    ADD_FAILURE() << "a synthetic and a sky file verified together";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.option(), sky);
    EXPECT_NE(std::string(e.what()).find("do not mix"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Written parts: one visit's touching ranges become one; others stay apart.
TEST(Storage, WrittenPartsMerge) {
  const auto merged = merge_written_parts(
      {{0, 7, 4, 6}, {0, 7, 0, 2}, {0, 7, 2, 4}, {1, 7, 6, 8}, {0, 3, 9, 10}, {0, 7, 8, 9}});
  const std::vector<WrittenPart> want{{0, 3, 9, 10}, {0, 7, 0, 6}, {0, 7, 8, 9}, {1, 7, 6, 8}};
  EXPECT_EQ(merged, want);
}

// A stonewalled file keeps its written parts and the provenance that
// rebuilds its binning; one with no parts listed is not complete.
TEST(Storage, StonewalledFileListsItsWrittenParts) {
  const auto obs = small_observation();
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_storage_parts";
  std::filesystem::create_directories(dir);
  auto pv = sky_provenance("T05_", 1e-5, 3, 1);
  pv.observation = {obs.vis_set, obs.time.text(), obs.freq.text(), obs.dec_deg};
  pv.margin = 12;
  pv.w_stack_step = 2.5;
  pv.stonewalled = true;
  const std::vector<WrittenPart> parts{{-1, 5, 0, 3}, {2, 9, 7, 8}};
  for (const bool listed : {true, false}) {
    const auto path = (dir / (listed ? "listed.h5" : "unlisted.h5")).string();
    auto backend = resolve_storage(StorageOptions{"hdf5", {}}, "out.h5").make();
    auto layout = layout_of(obs);
    layout.provenance = pv;
    FileClaim claim(path, nonce_of(layout));
    backend->open(claim.partial(), layout);
    if (listed) backend->set_written_parts(parts);
    backend->complete();
    publish(claim);
    const Uvh5Reader file(path);
    ASSERT_TRUE(file.provenance());
    const auto& got = *file.provenance();
    EXPECT_TRUE(got.stonewalled);
    EXPECT_EQ(got.observation.vis_set, obs.vis_set);
    EXPECT_EQ(got.observation.time, obs.time.text());
    EXPECT_EQ(got.observation.freq, obs.freq.text());
    EXPECT_EQ(got.observation.dec_deg, obs.dec_deg);
    EXPECT_EQ(got.margin, 12);
    EXPECT_EQ(got.w_stack_step, 2.5);
    EXPECT_EQ(file.written_parts(), listed ? parts : std::vector<WrittenPart>{});
  }
  std::filesystem::remove_all(dir);
}

// The observation's sampling reads back from its text exactly.
TEST(Storage, SamplingTextRoundTrips) {
  const auto s = telescope::parse_sampling("-460.123456789:460/1024/64", "--time", false);
  EXPECT_EQ(telescope::parse_sampling(s.text(), "--time", false).start, s.start);
  const auto f = telescope::parse_sampling("0.35e9:0.4725123456e9/11264/64", "--freq", true);
  EXPECT_EQ(telescope::parse_sampling(f.text(), "--freq", true).end, f.end);
}
}  // namespace
}  // namespace iotest::storage

namespace iotest::storage {
namespace {

// The chunks' CRC-32 is zlib's (what the files have always stored, and what
// Python's zlib.crc32 gives): the standard check value, and the affine
// combination of a chunk's parts that verify relies on.
TEST(Storage, ChunkCrcIsZlibsAndCombinesOverParts) {
  const char check[] = "123456789";
  EXPECT_EQ(chunk_crc32(check, 9), 0xCBF43926U);
  std::vector<unsigned char> a(4096), b(4096), whole(4096);
  for (size_t i = 0; i < a.size(); ++i) {  // disjoint parts, as a shared chunk's
    (i % 3 == 0 ? a : b)[i] = static_cast<unsigned char>(i * 37 + 11);
    whole[i] = a[i] ^ b[i];
  }
  EXPECT_EQ(combine_part_crc32({chunk_crc32(a.data(), 4096), chunk_crc32(b.data(), 4096)}, 4096),
            chunk_crc32(whole.data(), 4096));
  EXPECT_EQ(combine_part_crc32({chunk_crc32(whole.data(), 4096)}, 4096),
            chunk_crc32(whole.data(), 4096));
}

// The image file's layout: the facets' regions tile the pixel array once,
// but for column 0 (l = used/2, outside the image iotest makes); a
// facet's block holds its pixel (a, b) at row used/2 + m, column used/2 - l.
TEST(ImageFile, FacetRegionsTileThePixelArrayAndBlocksHoldTheirPixels) {
  for (const char* name : {"T05_", "8k-2k-512", "2k-1k-256"}) {
    const auto p = config::resolve_rec_set(name);
    const auto tiles = swiftly::facet_tiles(p);
    const index_t used = p.used_size, half = used / 2, nf = p.facets_per_axis;
    std::vector<int> covered(static_cast<size_t>(used * used), 0);
    for (index_t f = 0; f < p.facet_count(); ++f) {
      const auto& t0 = tiles[static_cast<size_t>(f / nf)];
      const auto& t1 = tiles[static_cast<size_t>(f % nf)];
      const auto r = facet_region(t0, t1, used);
      EXPECT_EQ(r.centre, half);
      for (index_t y = r.row; y < r.row + r.rows; ++y)
        for (index_t x = r.column; x < r.column + r.columns; ++x)
          ++covered[static_cast<size_t>(y * used + x)];
      if (f != p.facet_count() / 2) continue;
      // One facet, its pixels numbered: every block's values where they belong.
      const index_t yB = p.yB;
      Array2D facet(yB, yB);
      for (index_t a = 0; a < yB; ++a)
        for (index_t b = 0; b < yB; ++b) facet(a, b) = cplx(static_cast<double>(a), b);
      const index_t step = std::max<index_t>(1, r.rows / 3);
      std::vector<cplx> block(static_cast<size_t>(step * r.columns));
      for (index_t first = 0; first < r.rows; first += step) {
        const index_t rows = std::min(step, r.rows - first);
        facet_block(facet, t0, t1, yB, r, first, rows, block.data());
        for (index_t i = 0; i < rows; ++i)
          for (index_t c = 0; c < r.columns; ++c) {
            const index_t l = half - (r.column + c), m = r.row + first + i - half;
            ASSERT_EQ(block[static_cast<size_t>(i * r.columns + c)],
                      cplx(static_cast<double>(l - t0.offset + yB / 2), m - t1.offset + yB / 2));
          }
      }
    }
    for (index_t y = 0; y < used; ++y)
      for (index_t x = 0; x < used; ++x)
        ASSERT_EQ(covered[static_cast<size_t>(y * used + x)], x == 0 ? 0 : 1) << name;
  }
}

// Facets written in any order, a block at a time, read back from the
// file: FITS's pixel (x + 1, y + 1) holds l = used/2 - x, m = y - used/2,
// column 0 NaN (undefined); the file only under its partial name until published.
// (HDF5's [y][x], the same writer's, is read by h5py in
// tests/cli/test_run_image_file.py: these tests have no HDF5 headers.)
TEST(ImageFile, WriterPutsEveryFacetWhereItsPixelsLie) {
  const auto p = config::resolve_rec_set("T05_");
  const auto tiles = swiftly::facet_tiles(p);
  const index_t used = p.used_size, half = used / 2, nf = p.facets_per_axis;
  // Pixel (l, m) of the image holds l + i m.
  std::vector<Array2D> facets;
  for (index_t f = 0; f < p.facet_count(); ++f) {
    const auto& t0 = tiles[static_cast<size_t>(f / nf)];
    const auto& t1 = tiles[static_cast<size_t>(f % nf)];
    facets.emplace_back(p.yB, p.yB);
    for (index_t a = 0; a < p.yB; ++a)
      for (index_t b = 0; b < p.yB; ++b)
        facets.back()(a, b) = cplx(static_cast<double>(a - p.yB / 2 + t0.offset),
                                   static_cast<double>(b - p.yB / 2 + t1.offset));
  }
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_image_file";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ImageDescription what;
  what.rec_set = "T05_";
  what.used_size = used;
  what.pixel_lm = 1e-5;
  what.visibilities = 7;
  for (const char* name : {"img.fits", "img.h5"}) {
    const std::string path = (dir / name).string();
    {
      auto claim = claim_image_path(path, 42);
      ImageWriter writer(claim, what);
      for (index_t f = p.facet_count() - 1; f >= 0; --f)  // against the file's order
        writer.write_facet(facets[static_cast<size_t>(f)], tiles[static_cast<size_t>(f / nf)],
                           tiles[static_cast<size_t>(f % nf)], p.yB);
      writer.finish();
      EXPECT_FALSE(std::filesystem::exists(path));
      EXPECT_EQ(writer.bytes(), static_cast<index_t>(std::filesystem::file_size(claim.partial())));
      publish(claim);
    }
    if (!is_fits_path(name)) {
      EXPECT_GT(std::filesystem::file_size(path), static_cast<uintmax_t>(used * used * 16));
      continue;
    }
    fitsfile* file = nullptr;
    int status = 0, any = 0;
    ASSERT_EQ(fits_open_diskfile(&file, path.c_str(), READONLY, &status), 0);
    long naxes[4] = {};
    int naxis = 0;
    fits_get_img_dim(file, &naxis, &status);
    fits_get_img_size(file, 4, naxes, &status);
    EXPECT_EQ(naxis, 4);
    EXPECT_EQ(naxes[0], used);
    EXPECT_EQ(naxes[1], used);
    std::vector<double> real(static_cast<size_t>(used * used), -1.0);
    long first[4] = {1, 1, 1, 1};
    fits_read_pix(file, TDOUBLE, first, used * used, nullptr, real.data(), &any, &status);
    fits_close_file(file, &status);
    ASSERT_EQ(status, 0);
    for (index_t y = 0; y < used; ++y)
      for (index_t x = 0; x < used; ++x)
        if (x == 0)
          ASSERT_TRUE(std::isnan(real[static_cast<size_t>(y * used)])) << "y " << y;
        else
          ASSERT_EQ(real[static_cast<size_t>(y * used + x)], half - x) << "y " << y << " x " << x;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace iotest::storage
