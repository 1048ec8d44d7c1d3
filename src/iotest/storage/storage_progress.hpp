// A stalled shared file system (docs/pipeline.md, "A stalled file
// system"). When a host's link to its storage servers is cut, a write,
// fsync or close on CephFS (ceph-fuse), Lustre or GPFS blocks in the
// kernel, and nothing the process does cancels it: the run would wait
// forever. So each storage call of a run is marked as it starts and ends
// (StorageProgress, ProgressMark: two atomic stores and a clock read), and
// a watchdog thread per rank (StallWatch) looks at the marks once a second.
// A call in progress for longer than the bound, with no other call of the
// rank ending meanwhile, ends the job with one line naming the host, the
// call and the file.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace iotest::storage {

// What a storage call does, as the stall's line says it.
enum class StorageStep : std::int32_t {
  none,
  creating,    // claiming an output (its in-progress file)
  opening,     // creating the output and its header, synced
  writing,     // a chunk (or a shared output's collective round)
  syncing,     // fsync, MPI_File_sync
  closing,     // completing the output, synced
  publishing,  // giving an output its final name
  reading,     // a chunk read back (iotest read)
};
const char* step_name(StorageStep step);

// Nanoseconds on the steady clock (CLOCK_MONOTONIC: one clock for every
// process of the host, so a forked writer's marks read right in its
// streamer).
std::int64_t steady_ns();

// One writer's marks. It may live in memory a forked writer shares with
// its streamer (the writer's queue), so it holds lock-free atomics and a
// fixed-size name only, nothing allocated.
struct StorageProgress {
  static constexpr std::size_t kFileBytes = 1024;
  static_assert(std::atomic<std::int64_t>::is_always_lock_free);
  std::atomic<std::int64_t> since_ns{0};  // when the call in progress began; 0: none
  std::atomic<std::int64_t> ended_ns{0};  // when the last call ended; 0: none yet
  std::atomic<std::int32_t> step{0};      // the call in progress (StorageStep)
  // The file its calls are on: set before its first call, and not while
  // one is in progress (a writer writes one output), so the watchdog,
  // which reads it only behind a call in progress, reads it whole.
  char file[kFileBytes] = {};

  void name(const std::string& path);
  void begin(StorageStep s, std::int64_t now_ns);
  void end(std::int64_t now_ns);
};

// A call marked for its lifetime; `progress` null: not watched.
//
// Test hook: with IOTEST_TEST_STALL_STORAGE=STEP[:SECONDS] in a process's
// environment, the first call of that step (writing, syncing, ...) the
// process makes stalls after it is marked as begun: for SECONDS, or for
// ever without them, as a write blocked on a dead link would. For the
// tests only (tests/cli/test_storage_stall.py): no run should set it.
class ProgressMark {
 public:
  ProgressMark(StorageProgress* progress, StorageStep step);
  ~ProgressMark();
  ProgressMark(const ProgressMark&) = delete;
  ProgressMark& operator=(const ProgressMark&) = delete;

 private:
  StorageProgress* progress_;
};

// A wait for other ranks inside a marked call (a shared output's close
// waiting at a barrier for its slowest writer, whose own watchdog watches
// its writes): not this rank's storage call. The call's mark is ended as
// progress for the wait's lifetime and begun again after it. Seen on
// CephFS (issue 56): a phdf5 writer that finished first waited 108 s at
// the close's barrier, and an MDS restart pushed that past the bound.
class PeersWait {
 public:
  explicit PeersWait(StorageProgress* progress);
  ~PeersWait();
  PeersWait(const PeersWait&) = delete;
  PeersWait& operator=(const PeersWait&) = delete;

 private:
  StorageProgress* progress_;
  StorageStep resumed_ = StorageStep::none;
};

// A call stalled: the longest in progress, and how long the rank has made
// no progress (no call begun earlier, or any other, has ended since).
struct Stall {
  StorageStep step = StorageStep::none;
  std::string file;
  double seconds = 0;
};
// "storage made no progress for 120 s on node2: writing FILE (the file
// system stopped answering; --storage-stall-timeout)"
std::string describe(const Stall& stall, const std::string& host);

// The marks of a rank's writers and calls, which its watchdog reads.
class ProgressTable {
 public:
  // `progress` stays valid until removed (the watchdog reads it meanwhile).
  void add(const StorageProgress* progress);
  void remove(const StorageProgress* progress);
  // The oldest call in progress when no call has ended within `bound_ns`
  // of `now_ns` (nor begun: one that began since then has not stalled
  // long enough); nothing otherwise.
  std::optional<Stall> stalled(std::int64_t now_ns, std::int64_t bound_ns) const;

 private:
  mutable std::mutex lock_;
  std::vector<const StorageProgress*> marks_;
  std::int64_t removed_ended_ns_ = 0;  // the last end among the removed: progress too
};

// This process's table: its writers' queues and its other storage calls
// enter it. Never touched by a forked writer (which only marks its own
// StorageProgress, in shared memory).
ProgressTable& rank_progress();

// A file's storage calls outside the writers (a reader's, the dirty
// image's): its marks in rank_progress() for the WatchedFile's lifetime,
// one call at a time.
class WatchedFile {
 public:
  explicit WatchedFile(const std::string& file);
  ~WatchedFile();
  WatchedFile(const WatchedFile&) = delete;
  WatchedFile& operator=(const WatchedFile&) = delete;
  // A call on the file, marked while the mark lives.
  ProgressMark mark(StorageStep step) const { return ProgressMark(&progress_, step); }

 private:
  mutable StorageProgress progress_;
};

// A one-off storage call outside the writers (a claim, a publish): its own
// marks in rank_progress() while it lasts.
class WatchedCall {
 public:
  WatchedCall(StorageStep step, const std::string& file) : file_(file), mark_(file_.mark(step)) {}

 private:
  WatchedFile file_;
  ProgressMark mark_;  // after file_: ended before it leaves the table
};

// The watchdog: a thread that sleeps `period` between looks at `table`
// (never spinning) and calls `on_stall` once, on its own thread, when a
// call has stalled for `bound_s` seconds; it then looks no more. A bound
// of 0 watches nothing (no thread).
class StallWatch {
 public:
  using OnStall = std::function<void(const Stall&)>;
  StallWatch(const ProgressTable& table, double bound_s, OnStall on_stall,
             std::chrono::milliseconds period = std::chrono::seconds(1));
  // Stops the thread and joins it.
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

 private:
  void watch();
  const ProgressTable& table_;
  const std::int64_t bound_ns_;
  const OnStall on_stall_;
  const std::chrono::milliseconds period_;
  std::mutex lock_;
  std::condition_variable stop_changed_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace iotest::storage
