// A stalled file system (storage/storage_progress.hpp): the progress
// table's stall detection on a clock the tests give, the one line it
// makes, and the watchdog thread ending its wait on a stall, once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "iotest/storage/storage_progress.hpp"

namespace iotest::storage {
namespace {

constexpr std::int64_t kS = 1'000'000'000;  // a second in nanoseconds

TEST(StorageProgress, NothingInProgressIsNoStall) {
  ProgressTable table;
  StorageProgress writer;
  writer.name("out0.h5.run-1.partial");
  table.add(&writer);
  EXPECT_FALSE(table.stalled(1000 * kS, 3 * kS));
  writer.begin(StorageStep::writing, 10 * kS);
  writer.end(11 * kS);
  EXPECT_FALSE(table.stalled(1000 * kS, 3 * kS));
}

TEST(StorageProgress, ACallPastTheBoundIsAStallNamingItsStepAndFile) {
  ProgressTable table;
  StorageProgress writer;
  writer.name("/shared/out/vis1.h5.run-123.partial");
  table.add(&writer);
  writer.begin(StorageStep::writing, 100 * kS);
  EXPECT_FALSE(table.stalled(102 * kS, 3 * kS));  // under the bound
  const auto stall = table.stalled(103 * kS, 3 * kS);
  ASSERT_TRUE(stall);
  EXPECT_EQ(stall->step, StorageStep::writing);
  EXPECT_EQ(stall->file, "/shared/out/vis1.h5.run-123.partial");
  EXPECT_DOUBLE_EQ(stall->seconds, 3.0);
  EXPECT_EQ(describe(*stall, "node2"),
            "storage made no progress for 3 s on node2: writing "
            "/shared/out/vis1.h5.run-123.partial (the file system stopped answering; "
            "--storage-stall-timeout)");
}

TEST(StorageProgress, AnotherCallEndingIsProgress) {
  // One writer blocked while another keeps writing: the file system
  // answers (a long fsync of a large file is not a dead link).
  ProgressTable table;
  StorageProgress slow, busy;
  slow.name("out0.h5");
  busy.name("out1.h5");
  table.add(&slow);
  table.add(&busy);
  slow.begin(StorageStep::syncing, 0);
  for (std::int64_t t = 0; t < 10; ++t) {
    busy.begin(StorageStep::writing, t * kS);
    busy.end(t * kS + kS / 2);
  }
  EXPECT_FALSE(table.stalled(12 * kS, 3 * kS));  // last end at 9.5 s
  const auto stall = table.stalled(13 * kS, 3 * kS);
  ASSERT_TRUE(stall);
  EXPECT_EQ(stall->step, StorageStep::syncing);  // the oldest call in progress
  EXPECT_EQ(stall->file, "out0.h5");
  EXPECT_DOUBLE_EQ(stall->seconds, 3.5);  // since the last end
}

TEST(StorageProgress, AWriterGoneStillCountsItsLastEnd) {
  ProgressTable table;
  StorageProgress stuck;
  stuck.name("out0.h5");
  table.add(&stuck);
  stuck.begin(StorageStep::closing, 0);
  {
    StorageProgress done;
    table.add(&done);
    done.begin(StorageStep::closing, 1 * kS);
    done.end(5 * kS);
    table.remove(&done);
  }
  EXPECT_FALSE(table.stalled(7 * kS, 3 * kS));
  EXPECT_TRUE(table.stalled(8 * kS, 3 * kS));
  table.remove(&stuck);
  EXPECT_FALSE(table.stalled(100 * kS, 3 * kS));  // nothing watched any more
}

TEST(StorageProgress, AMarkBracketsTheCall) {
  StorageProgress p;
  {
    const ProgressMark mark(&p, StorageStep::opening);
    EXPECT_NE(p.since_ns.load(), 0);
    EXPECT_EQ(p.step.load(), static_cast<int>(StorageStep::opening));
  }
  EXPECT_EQ(p.since_ns.load(), 0);
  EXPECT_NE(p.ended_ns.load(), 0);
  const ProgressMark unwatched(nullptr, StorageStep::writing);  // a back-end not watched
}

TEST(StorageProgress, AWaitForPeersInsideACallIsNoStall) {
  ProgressTable table;
  StorageProgress p;
  table.add(&p);
  const ProgressMark close(&p, StorageStep::closing);
  {
    const PeersWait peers(&p);  // the close's barrier: the others still write
    EXPECT_EQ(p.since_ns.load(), 0);
    EXPECT_FALSE(table.stalled(p.ended_ns.load() + 1000 * kS, 3 * kS));
  }
  EXPECT_NE(p.since_ns.load(), 0);  // the close watched again, from the wait's end
  EXPECT_EQ(p.step.load(), static_cast<int>(StorageStep::closing));
  EXPECT_TRUE(table.stalled(p.since_ns.load() + 3 * kS, 3 * kS));
  table.remove(&p);
}

TEST(StorageProgress, TheWatchdogCallsOnceOnAStall) {
  ProgressTable table;
  StorageProgress writer;
  writer.name("out0.bin.run-7.partial");
  table.add(&writer);
  writer.begin(StorageStep::writing, steady_ns() - 10 * kS);  // blocked for 10 s already
  std::atomic<int> calls{0};
  Stall seen;
  {
    const StallWatch watch(
        table, 3.0,
        [&](const Stall& s) {
          seen = s;
          ++calls;
        },
        std::chrono::milliseconds(10));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (calls == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // it would call again by now
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen.file, "out0.bin.run-7.partial");
  EXPECT_GE(seen.seconds, 10.0);
}

TEST(StorageProgress, NoBoundNoWatchdog) {
  ProgressTable table;
  StorageProgress writer;
  table.add(&writer);
  writer.begin(StorageStep::writing, 1);
  std::atomic<int> calls{0};
  {
    const StallWatch watch(
        table, 0, [&](const Stall&) { ++calls; }, std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace iotest::storage
