// The pipeline's pure pieces: the work plan every rank agrees on, the split
// of busy subgrids, and the writers' shared-memory queues (threads and
// forked processes) with the null back-end.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "iotest/common/system.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/pipeline/run_options.hpp"
#include "iotest/pipeline/time_series.hpp"
#include "iotest/pipeline/work.hpp"
#include "iotest/pipeline/writers.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::pipeline {
namespace {

TEST(WorkPlan, VisitsFollowTheWalkAndBusySubgridsAreSplit) {
  const auto p = config::resolve_rec_set("T05_");
  std::map<std::pair<index_t, index_t>, index_t> per_visit = {
      {{1, 3}, 10}, {{0, 20}, 1000}, {{0, 7}, 10}, {{0, 9}, 10}};
  const auto plan = plan_work(p, per_visit, 3, true);
  ASSERT_EQ(plan.visits.size(), 4u);
  // Stack first, then subgrid (column-major walk).
  EXPECT_EQ(plan.visits[0].subgrid, 7);
  EXPECT_EQ(plan.visits[2].subgrid, 20);
  EXPECT_EQ(plan.visits[3].stack, 1);
  EXPECT_EQ(plan.visits[2].parts, 3);  // 1000 of 1030 visibilities: one part per streamer
  EXPECT_EQ(plan.visits[0].parts, 1);
  ASSERT_EQ(plan.parts.size(), 6u);
  std::set<int> streamers;
  index_t sum = 0;
  for (index_t i = 0; i < 3; ++i) {
    const auto& part = plan.parts[static_cast<size_t>(plan.visits[2].first_part + i)];
    streamers.insert(part.streamer);
    sum += part.visibilities;
  }
  EXPECT_EQ(streamers.size(), 3u);  // distinct streamers
  EXPECT_EQ(sum, 1000);
  for (const auto& part : plan.parts) EXPECT_GE(part.streamer, 0);
}

TEST(WorkPlan, WithoutVisibilitiesEverySubgridOnce) {
  const auto p = config::resolve_rec_set("T05_");
  const auto plan = plan_work(p, {}, 2, false);
  EXPECT_EQ(static_cast<index_t>(plan.visits.size()), p.subgrid_count());
  EXPECT_EQ(plan.parts.size(), plan.visits.size());
  for (const auto& part : plan.parts) EXPECT_EQ(part.streamer, -1);  // the assigner decides
}

// Samples at irregular times, spread over regular intervals: each
// difference is shared out by the time it overlaps each interval.
TEST(TimeSeries, IntervalsShareEachDifferenceByOverlap) {
  std::vector<TimeSample> samples = {
      {0.0, {0.0, 0.0, 0, 0, 0}},
      {1.5, {0.3, 0.0, 300, 0, 1500}},   // 200 visibilities/s, 0.2 s waiting per s
      {2.5, {0.3, 0.5, 300, 10, 1500}},  // half idle, then nothing moved
  };
  const auto f = per_interval(samples, 1.0);
  ASSERT_EQ(f.busy_s.size(), 3u);  // [0,1), [1,2), [2,2.5)
  EXPECT_EQ(f.visibilities, (std::vector<index_t>{200, 100, 0}));
  EXPECT_EQ(f.bytes_written, (std::vector<index_t>{1000, 500, 0}));
  EXPECT_EQ(f.bytes_sent, (std::vector<index_t>{0, 5, 5}));
  EXPECT_NEAR(f.wait_s[0], 0.2, 1e-12);
  EXPECT_NEAR(f.wait_s[1], 0.1, 1e-12);
  EXPECT_NEAR(f.busy_s[0], 0.8, 1e-12);
  EXPECT_NEAR(f.busy_s[1], 1.0 - 0.1 - 0.25, 1e-12);
  EXPECT_NEAR(f.busy_s[2], 0.5 - 0.25, 1e-12);  // the last interval is half long
}

TEST(TimeSeries, SamplesStayBoundedAsTheRunGoesOn) {
  TimeSeries series;
  series.start(1e-9, Clock::now());  // due at every call
  StageTotals t;
  for (int i = 0; i < 3 * static_cast<int>(TimeSeries::kMaxSamples); ++i) {
    t.visibilities = i;
    series.sample([&] { return t; });
  }
  series.finish(t);
  const auto& s = series.samples();
  EXPECT_LE(s.size(), TimeSeries::kMaxSamples);
  EXPECT_GT(s.size(), TimeSeries::kMaxSamples / 4);
  EXPECT_EQ(s.front().t, 0.0);
  EXPECT_EQ(s.back().totals.visibilities, t.visibilities);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_GE(s[i].t, s[i - 1].t);
}

TEST(Writers, OutputPathsNumberTheWriters) {
  EXPECT_EQ(output_path("/tmp/out%d.h5", 3, 4), "/tmp/out3.h5");
  EXPECT_EQ(output_path("/tmp/out.h5", 0, 1), "/tmp/out.h5");
  EXPECT_EQ(output_path("/tmp/out.h5", 2, 4), "/tmp/out.2.h5");
  EXPECT_EQ(output_path("/tmp/a.b/out", 1, 2), "/tmp/a.b/out.1");
}

TEST(Writers, OutputPathsNameTheHost) {
  EXPECT_EQ(with_host("/local/%h/vis%d.%h.h5", "nid001"), "/local/nid001/vis%d.nid001.h5");
  EXPECT_EQ(with_host("/tmp/out%d.h5", "n"), "/tmp/out%d.h5");
  EXPECT_EQ(with_host("%h%h", "ab"), "abab");
  EXPECT_EQ(output_path("/tmp/%h-%d.h5", 2, 4), "/tmp/" + iotest::host_name() + "-2.h5");
}

// A one-slot queue between a pushing and a popping thread: every chunk
// arrives, in order, and the pusher waited for the slot.
TEST(Writers, QueueOfOneSlotPassesEveryChunk) {
  ChunkQueue queue(1, 4, 1, false);
  std::thread consumer([&] {
    std::vector<cplx> data(4);
    storage::ChunkKey key;
    index_t n = 0, expected = 0;
    while (queue.pop(key, data.data(), n)) {
      EXPECT_EQ(key.row_chunk, expected);
      EXPECT_EQ(data[3], cplx(static_cast<double>(expected), 0));
      ++expected;
    }
    EXPECT_EQ(expected, 100);
  });
  for (index_t i = 0; i < 100; ++i) {
    const std::vector<cplx> data(4, cplx(static_cast<double>(i), 0));
    queue.push({i, 0}, data.data(), 4);
  }
  queue.close();
  consumer.join();
  EXPECT_EQ(queue.high_water(), 1);
}

// Several pushing threads and one writer taking chunks in place: each
// pusher's chunks arrive whole and in its order, though pushers copy in
// without the lock and resume only once a full queue is half empty.
TEST(Writers, QueueKeepsEachPushersOrder) {
  ChunkQueue queue(4, 256, 4, false);
  std::thread writer([&] {
    ChunkQueue::Entry e;
    index_t count = 0;
    std::vector<index_t> next(3, 0);
    while (queue.peek(e) == ChunkQueue::Peek::chunk) {
      const auto pusher = static_cast<size_t>(e.key.freq_chunk);
      EXPECT_EQ(e.key.row_chunk, next[pusher]++);
      EXPECT_EQ(e.data[0], e.data[255]);  // copied in whole
      EXPECT_EQ(e.data[255],
                cplx(static_cast<double>(e.key.row_chunk), static_cast<double>(pusher)));
      // Odd chunks came with presence bits (pusher p's: word 3 = p), even ones without.
      if (e.key.row_chunk % 2) {
        ASSERT_NE(e.present, nullptr);
        EXPECT_EQ(e.present[3], pusher);
      } else {
        EXPECT_EQ(e.present, nullptr);
      }
      queue.release();
      ++count;
    }
    EXPECT_EQ(count, 3 * 200);
  });
  std::vector<std::thread> pushers;
  for (index_t p = 0; p < 3; ++p)
    pushers.emplace_back([&queue, p] {
      for (index_t i = 0; i < 200; ++i) {
        const std::vector<cplx> data(256, cplx(static_cast<double>(i), static_cast<double>(p)));
        const std::vector<storage::PresenceWord> bits{0, 0, 0,
                                                      static_cast<storage::PresenceWord>(p)};
        queue.push({i, p}, data.data(), 256, i % 2 ? bits.data() : nullptr);
      }
    });
  for (auto& t : pushers) t.join();
  queue.close();
  writer.join();
  EXPECT_LE(queue.high_water(), 4);
}

// Parts of a chunk wait until whole and go out once; whole chunks go
// straight on; past `slots` held chunks the oldest goes as it is (its later
// parts then go straight on, as rewrites); flush writes what is left.
TEST(Writers, PartialChunksWriteEachChunkOnceWhole) {
  const auto obs = telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/16/8", -40.0});
  const auto layout = storage::layout_of(obs);  // chunks of 4 x 8 = 32 visibilities
  PartialChunks partial(layout, 2);
  std::vector<std::pair<index_t, index_t>> written;  // (row chunk, visibilities)
  std::vector<cplx> last;
  std::vector<storage::PresenceWord> last_bits;  // empty: written whole (no bits)
  const auto write = [&](const storage::ChunkKey& key, const cplx* data, index_t n,
                         const storage::PresenceWord* present) {
    written.emplace_back(key.row_chunk, n);
    last.assign(data, data + 32);
    last_bits.assign(present ? 1 : 0, present ? present[0] : 0);
  };
  std::vector<cplx> a(32), b(32);
  for (size_t i = 0; i < 32; ++i) (i < 12 ? a : b)[i] = cplx(static_cast<double>(i + 1), 0);
  const storage::PresenceWord a_bits = (1U << 12) - 1, b_bits = 0xffffffffU & ~a_bits;
  partial.add({0, 0}, a.data(), 12, &a_bits, write);  // first part: held
  EXPECT_TRUE(written.empty());
  partial.add({1, 0}, b.data(), 32, nullptr, write);  // whole: straight on
  partial.add({0, 0}, b.data(), 20, &b_bits, write);  // the rest: chunk 0 whole, merged
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[1], std::make_pair(index_t{0}, index_t{32}));
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(last[i], cplx(static_cast<double>(i + 1), 0));
  EXPECT_TRUE(last_bits.empty());  // whole once merged
  EXPECT_EQ(partial.held(), 0);

  partial.add({2, 0}, a.data(), 12, &a_bits, write);
  partial.add({3, 0}, a.data(), 12, &a_bits, write);
  partial.add({4, 0}, a.data(), 12, &a_bits, write);  // a third: chunk 2 goes as it is
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(written[2], std::make_pair(index_t{2}, index_t{12}));
  EXPECT_EQ(last_bits, std::vector<storage::PresenceWord>{a_bits});  // a part, with its bits
  partial.add({2, 0}, b.data(), 20, &b_bits, write);  // its rest goes straight on (a rewrite)
  ASSERT_EQ(written.size(), 4u);
  EXPECT_EQ(written[3], std::make_pair(index_t{2}, index_t{20}));
  EXPECT_EQ(last_bits, std::vector<storage::PresenceWord>{b_bits});
  partial.flush(write);  // chunks 3 and 4, in the order they came
  ASSERT_EQ(written.size(), 6u);
  EXPECT_EQ(written[4].first, 3);
  EXPECT_EQ(written[5].first, 4);
  EXPECT_EQ(partial.held(), 0);
}

// Parts add only the words of 64 values they carry, and a held buffer
// reused from an earlier chunk is zero wherever its new part carries none.
TEST(Writers, PartialChunksMergeByPresenceWords) {
  const auto obs = telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/64/64", -40.0});
  const auto layout = storage::layout_of(obs);  // chunks of 4 x 64 = 256 values, 4 words
  ASSERT_EQ(layout.presence_words(), 4);
  PartialChunks partial(layout, 1);
  std::vector<cplx> last;
  const auto write = [&](const storage::ChunkKey&, const cplx* data, index_t,
                         const storage::PresenceWord*) { last.assign(data, data + 256); };
  // Parts of chunk 0: words 0 and 2, then 1 and 3; zero elsewhere, as they come.
  const auto part = [](std::initializer_list<int> words, double value) {
    std::vector<cplx> v(256);
    std::vector<storage::PresenceWord> bits(4, 0);
    for (const int w : words) {
      bits[static_cast<size_t>(w)] = ~storage::PresenceWord{0};
      for (int i = 0; i < 64; ++i) v[static_cast<size_t>(w * 64 + i)] = cplx(value + i, -value);
    }
    return std::make_pair(v, bits);
  };
  const auto [a, a_bits] = part({0, 2}, 1000);
  const auto [b, b_bits] = part({1, 3}, 2000);
  partial.add({0, 0}, a.data(), 128, a_bits.data(), write);
  EXPECT_TRUE(last.empty());
  partial.add({0, 0}, b.data(), 128, b_bits.data(), write);
  ASSERT_EQ(last.size(), 256u);
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(last[i], a[i] + b[i]) << i;
  // Chunk 1's part reuses chunk 0's buffer: only word 1 carried, zeros elsewhere.
  const auto [c, c_bits] = part({1}, 3000);
  partial.add({1, 0}, c.data(), 64, c_bits.data(), write);
  partial.flush(write);
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(last[i], c[i]) << i;
}

// A writer looks ahead of its releases (its I/O thread releases entries
// once written): every entry is seen once, in order, with its own values,
// while the pusher refills the slots released behind it.
TEST(Writers, QueueLookAheadSeesEveryEntryInOrder) {
  ChunkQueue queue(4, 64, 1, false);
  std::thread pusher([&] {
    for (index_t i = 0; i < 300; ++i) {
      const std::vector<cplx> data(64, cplx(static_cast<double>(i), 0));
      queue.push({i, 0}, data.data(), 64);
    }
    queue.close();
  });
  std::mutex lock;
  std::condition_variable taken;
  index_t seen = 0;
  std::thread releaser([&] {  // releases what the reader has taken, in order
    for (index_t k = 0; k < 300; ++k) {
      std::unique_lock<std::mutex> hold(lock);
      taken.wait(hold, [&] { return seen > k; });
      hold.unlock();
      queue.release();
    }
  });
  index_t number = 0;
  ChunkQueue::Entry e;
  while (queue.peek_at(number, e) == ChunkQueue::Peek::chunk) {
    EXPECT_EQ(e.key.row_chunk, number);
    EXPECT_EQ(e.data[63], cplx(static_cast<double>(number), 0));
    ASSERT_NE(e.crc32, nullptr);  // whole: the pusher's checksum came with it
    EXPECT_EQ(*e.crc32, storage::chunk_crc32(e.data, 64 * static_cast<index_t>(sizeof(cplx))));
    ++number;
    const std::lock_guard<std::mutex> hold(lock);
    ++seen;
    taken.notify_one();
  }
  EXPECT_EQ(number, 300);
  pusher.join();
  releaser.join();
  EXPECT_LE(queue.high_water(), 4);
}

// A chunk made in its slot arrives as a pushed one does: its values, and
// for a whole chunk the CRC-32 its maker returned; a part's presence bits
// with it and no checksum. A maker that throws fails the queue.
TEST(Writers, QueueTakesChunksMadeInTheirSlots) {
  ChunkQueue queue(2, 64, 1, false);
  const auto make = [](double value) {
    return [value](void* slot, storage::StoredForm) {
      auto* values = static_cast<cplx*>(slot);
      std::fill(values, values + 64, cplx(value, 1));
      return storage::chunk_crc32(values, 64 * static_cast<index_t>(sizeof(cplx)));
    };
  };
  queue.push_made({3, 1}, 64, nullptr, make(7));
  const storage::PresenceWord bits = 0xff;
  queue.push_made({4, 0}, 8, &bits, make(8));
  ChunkQueue::Entry e;
  ASSERT_EQ(queue.peek(e), ChunkQueue::Peek::chunk);
  EXPECT_EQ(e.key.row_chunk, 3);
  EXPECT_EQ(e.visibilities, 64);
  EXPECT_EQ(e.data[63], cplx(7, 1));
  EXPECT_EQ(e.present, nullptr);
  ASSERT_NE(e.crc32, nullptr);
  EXPECT_EQ(*e.crc32, storage::chunk_crc32(e.data, 64 * static_cast<index_t>(sizeof(cplx))));
  queue.release();
  ASSERT_EQ(queue.peek(e), ChunkQueue::Peek::chunk);
  EXPECT_EQ(e.data[0], cplx(8, 1));
  ASSERT_NE(e.present, nullptr);
  EXPECT_EQ(e.present[0], bits);
  EXPECT_EQ(e.crc32, nullptr);
  queue.release();
  EXPECT_THROW(queue.push_made({5, 0}, 64, nullptr,
                               [](void*, storage::StoredForm) -> std::uint32_t {
                                 throw std::runtime_error("no");
                               }),
               std::runtime_error);
  EXPECT_NE(queue.failure().find("no"), std::string::npos);
  EXPECT_THROW(queue.push({6, 0}, std::vector<cplx>(64).data(), 64), std::runtime_error);
}

// A whole chunk pushed in a back-end's stored form is converted as it is
// copied in, and its CRC-32 is of the stored bytes; parts refuse it.
TEST(Writers, QueueConvertsWholeChunksToTheStoredForm) {
  ChunkQueue queue(2, 64, 1, false);
  std::vector<cplx> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = cplx(static_cast<double>(i), 0.5 + i);
  queue.push({1, 0}, data.data(), 64, nullptr, storage::StoredForm::single_conjugated);
  ChunkQueue::Entry e;
  ASSERT_EQ(queue.peek(e), ChunkQueue::Peek::chunk);
  EXPECT_TRUE(e.stored);
  const auto* cells = reinterpret_cast<const std::complex<float>*>(e.data);
  for (size_t i = 0; i < data.size(); ++i)
    ASSERT_EQ(cells[i], std::complex<float>(static_cast<float>(i), -0.5F - static_cast<float>(i)));
  ASSERT_NE(e.crc32, nullptr);
  EXPECT_EQ(*e.crc32, storage::chunk_crc32(cells, 64 * 8));
  queue.release();
  const storage::PresenceWord bits = 1;
  EXPECT_THROW(queue.push({2, 0}, data.data(), 1, &bits, storage::StoredForm::single_conjugated),
               std::logic_error);
}

TEST(Writers, FailureReachesThePusher) {
  ChunkQueue queue(2, 4, 1, false);
  queue.fail("disk full");
  const std::vector<cplx> data(4);
  try {
    queue.push({0, 0}, data.data(), 4);
    FAIL() << "push after a failure must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
}

// A writer process killed from outside fails nothing itself: a pusher
// waiting on its full queue must notice, not wait forever.
TEST(Writers, DeadWriterProcessReachesThePusher) {
  ChunkQueue queue(1, 4, 1, true);
  const pid_t child = fork();
  if (child == 0) _exit(0);  // a writer that never takes a chunk
  queue.watch(child);
  const std::vector<cplx> data(4);
  queue.push({0, 0}, data.data(), 4);  // the queue is full
  EXPECT_THROW(queue.push({1, 0}, data.data(), 4), std::runtime_error);
  waitpid(child, nullptr, 0);
}

// A run publishes its outputs only once every rank has finished: until
// then they keep their temporary names.
TEST(Writers, OutputsKeepTheirTemporaryNamesUntilPublished) {
  const auto obs = telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/16/8", -40.0});
  const auto dir = std::filesystem::path(::testing::TempDir()) / "iotest_writers_publish";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "out.h5").string();
  WriterOptions o;
  o.storage = storage::resolve_storage({"hdf5", {}}, path);
  o.paths = {path};
  storage::FileClaim claim(path, 0);
  o.partials = {claim.partial()};
  Writers writers(o, storage::layout_of(obs));
  writers.finish();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::exists(claim.partial()));
  storage::publish(claim);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(claim.partial()));
  std::filesystem::remove_all(dir);
}

class WritersOfKind : public ::testing::TestWithParam<bool> {};

// Threads or forked processes: the null back-end's counts come back.
TEST_P(WritersOfKind, CountChunksAndRewrites) {
  const auto obs = telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/16/8", -40.0});
  const auto layout = storage::layout_of(obs);
  WriterOptions o;
  o.storage = storage::resolve_storage({"null", {}}, "");
  o.paths = {"", ""};
  o.partials = {"", ""};
  o.queue_slots = 2;
  o.fork = GetParam();
  Writers writers(o, layout);
  const std::vector<cplx> data(static_cast<size_t>(layout.chunk_values()));
  for (index_t r = 0; r < 10; ++r) writers.write({r, 1}, data.data(), 3);
  writers.write({4, 1}, data.data(), 2);  // again: a rewrite
  const auto stats = writers.finish();
  ASSERT_EQ(stats.size(), 2u);
  index_t written = 0, rewritten = 0, visibilities = 0;
  for (const auto& s : stats) {
    written += s.chunks_written;
    rewritten += s.chunks_rewritten;
    visibilities += s.visibilities;
  }
  EXPECT_EQ(written, 10);
  EXPECT_EQ(rewritten, 1);
  EXPECT_EQ(visibilities, 32);
}

// Held until whole, the parts of a chunk make one write, not a rewrite.
TEST_P(WritersOfKind, HoldPartsUntilWhole) {
  const auto obs = telescope::make_observation({"vlaa", "-60:60/8/4", "1e9:1.1e9/16/8", -40.0});
  const auto layout = storage::layout_of(obs);
  WriterOptions o;
  o.storage = storage::resolve_storage({}, "");
  o.paths = {""};
  o.partials = {""};
  o.queue_slots = 2;
  o.partial_slots = 10;
  o.fork = GetParam();
  Writers writers(o, layout);
  const std::vector<cplx> data(static_cast<size_t>(layout.chunk_values()));
  const storage::PresenceWord first = (1U << 20) - 1, rest = 0xffffffffU & ~first;
  for (index_t r = 0; r < 10; ++r) writers.write({r, 1}, data.data(), 20, &first);
  for (index_t r = 0; r < 10; ++r) writers.write({r, 1}, data.data(), 12, &rest);
  const auto stats = writers.finish();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].chunks_written, 10);
  EXPECT_EQ(stats[0].chunks_rewritten, 0);
  EXPECT_EQ(stats[0].visibilities, 320);
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndProcesses, WritersOfKind, ::testing::Bool());

// Predict writes every row and storage only reads every row; the imaging
// direction grids the autocorrelations only when asked.
TEST(RunOptions, OnlyTheImagingDirectionLeavesAutocorrelationsOut) {
  RunOptions o;
  EXPECT_TRUE(job::bins_autocorrelations(o));
  for (const auto d : {swiftly::Direction::image, swiftly::Direction::both}) {
    o.direction = d;
    o.image_autocorrelations = false;
    EXPECT_FALSE(job::bins_autocorrelations(o));
    o.image_autocorrelations = true;
    EXPECT_TRUE(job::bins_autocorrelations(o));
  }
  o.image_autocorrelations = false;
  o.direction = swiftly::Direction::image;
  o.synthetic_vis = true;
  EXPECT_TRUE(job::bins_autocorrelations(o));
}

}  // namespace
}  // namespace iotest::pipeline
