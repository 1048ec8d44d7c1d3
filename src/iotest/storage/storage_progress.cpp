#include "iotest/storage/storage_progress.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "iotest/common/system.hpp"

namespace iotest::storage {

const char* step_name(StorageStep step) {
  switch (step) {
    case StorageStep::creating:
      return "creating";
    case StorageStep::opening:
      return "opening";
    case StorageStep::writing:
      return "writing";
    case StorageStep::syncing:
      return "syncing";
    case StorageStep::closing:
      return "closing";
    case StorageStep::publishing:
      return "publishing";
    case StorageStep::reading:
      return "reading";
    case StorageStep::none:
      break;
  }
  return "none";
}

std::int64_t steady_ns() {
  // The run's Clock (CLOCK_MONOTONIC on Linux: one time line for a rank and
  // its forked writers, which share the marks).
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void StorageProgress::name(const std::string& path) {
  const std::size_t n = std::min(path.size(), kFileBytes - 1);
  std::memcpy(file, path.data(), n);
  file[n] = '\0';
}

void StorageProgress::begin(StorageStep s, std::int64_t now_ns) {
  step.store(static_cast<std::int32_t>(s), std::memory_order_relaxed);
  // Released: a watchdog that sees the start sees the step and the name.
  since_ns.store(std::max<std::int64_t>(now_ns, 1), std::memory_order_release);
}

void StorageProgress::end(std::int64_t now_ns) {
  since_ns.store(0, std::memory_order_relaxed);
  ended_ns.store(now_ns, std::memory_order_release);
}

namespace {

// IOTEST_TEST_STALL_STORAGE=STEP[:SECONDS] (the test hook, storage_progress.hpp).
struct StallHook {
  StorageStep step = StorageStep::none;
  double seconds = -1;  // < 0: for ever
};

StallHook read_stall_hook() {
  StallHook hook;
  const char* value = std::getenv("IOTEST_TEST_STALL_STORAGE");
  if (!value || !*value) return hook;
  const std::string text = value;
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  for (auto s :
       {StorageStep::creating, StorageStep::opening, StorageStep::writing, StorageStep::syncing,
        StorageStep::closing, StorageStep::publishing, StorageStep::reading})
    if (name == step_name(s)) hook.step = s;
  if (colon != std::string::npos) hook.seconds = std::atof(text.c_str() + colon + 1);
  return hook;
}

void stall_if_hooked(StorageStep step) {
  static const StallHook hook = read_stall_hook();
  static std::atomic<bool> taken{false};
  if (hook.step != step || taken.exchange(true)) return;
  if (hook.seconds >= 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(hook.seconds));
    return;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // a dead link's write
}

}  // namespace

ProgressMark::ProgressMark(StorageProgress* progress, StorageStep step) : progress_(progress) {
  if (!progress_) return;
  progress_->begin(step, steady_ns());
  stall_if_hooked(step);
}

ProgressMark::~ProgressMark() {
  if (progress_) progress_->end(steady_ns());
}

PeersWait::PeersWait(StorageProgress* progress) : progress_(progress) {
  if (!progress_ || progress_->since_ns.load(std::memory_order_relaxed) == 0) return;
  resumed_ = static_cast<StorageStep>(progress_->step.load(std::memory_order_relaxed));
  progress_->end(steady_ns());
}

PeersWait::~PeersWait() {
  if (resumed_ != StorageStep::none) progress_->begin(resumed_, steady_ns());
}

std::string describe(const Stall& stall, const std::string& host) {
  return fmt::format(
      "storage made no progress for {} s on {}: {} {} (the file system stopped answering; "
      "--storage-stall-timeout)",
      static_cast<long long>(stall.seconds), host, step_name(stall.step), stall.file);
}

void ProgressTable::add(const StorageProgress* progress) {
  const std::lock_guard<std::mutex> hold(lock_);
  marks_.push_back(progress);
}

void ProgressTable::remove(const StorageProgress* progress) {
  const std::lock_guard<std::mutex> hold(lock_);
  const auto at = std::find(marks_.begin(), marks_.end(), progress);
  if (at == marks_.end()) return;
  removed_ended_ns_ = std::max(removed_ended_ns_, (*at)->ended_ns.load(std::memory_order_acquire));
  marks_.erase(at);
}

std::optional<Stall> ProgressTable::stalled(std::int64_t now_ns, std::int64_t bound_ns) const {
  const std::lock_guard<std::mutex> hold(lock_);
  std::int64_t last_end = removed_ended_ns_;
  const StorageProgress* oldest = nullptr;
  std::int64_t oldest_since = 0;
  for (const auto* m : marks_) {
    last_end = std::max(last_end, m->ended_ns.load(std::memory_order_acquire));
    const std::int64_t since = m->since_ns.load(std::memory_order_acquire);
    if (since != 0 && (!oldest || since < oldest_since)) oldest = m, oldest_since = since;
  }
  if (!oldest) return std::nullopt;
  const std::int64_t quiet_since = std::max(oldest_since, last_end);
  if (now_ns - quiet_since < bound_ns) return std::nullopt;
  Stall stall;
  stall.step = static_cast<StorageStep>(oldest->step.load(std::memory_order_relaxed));
  stall.file.assign(oldest->file, strnlen(oldest->file, StorageProgress::kFileBytes));
  stall.seconds = static_cast<double>(now_ns - quiet_since) * 1e-9;
  return stall;
}

ProgressTable& rank_progress() {
  static ProgressTable table;
  return table;
}

WatchedFile::WatchedFile(const std::string& file) {
  progress_.name(file);
  rank_progress().add(&progress_);
}

WatchedFile::~WatchedFile() {
  rank_progress().remove(&progress_);
}

StallWatch::StallWatch(const ProgressTable& table, double bound_s, OnStall on_stall,
                       std::chrono::milliseconds period)
    : table_(table),
      bound_ns_(static_cast<std::int64_t>(bound_s * 1e9)),
      on_stall_(std::move(on_stall)),
      period_(period) {
  if (bound_ns_ > 0) thread_ = std::thread([this] { watch(); });
}

StallWatch::~StallWatch() {
  {
    const std::lock_guard<std::mutex> hold(lock_);
    stop_ = true;
  }
  stop_changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StallWatch::watch() {
  std::unique_lock<std::mutex> hold(lock_);
  while (!stop_changed_.wait_for(hold, period_, [&] { return stop_; })) {
    if (const auto stall = table_.stalled(steady_ns(), bound_ns_)) {
      hold.unlock();
      on_stall_(*stall);
      return;
    }
  }
}

}  // namespace iotest::storage
