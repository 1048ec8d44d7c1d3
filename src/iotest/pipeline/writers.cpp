#include "iotest/pipeline/writers.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"
#include "iotest/storage/output/file_claim.hpp"

namespace iotest::pipeline {

// The queue's header, followed by its slots' keys and data, all in one
// shared mapping.
struct ChunkQueue::Shared {
  pthread_mutex_t lock;
  pthread_cond_t not_full, not_empty;
  index_t slots = 0, chunk_values = 0, presence_words = 0;
  index_t head = 0, count = 0, high_water = 0;  // count: slots taken, filled or being filled
  index_t free_count = 0;                       // slots on the free stack
  index_t released = 0;                         // entries released so far (head's number)
  bool closed = false, failed = false;
  bool opened = false;  // the writer's output is open
  double push_wait_s = 0;
  index_t taken_bytes = 0;  // values of the chunks the writer has taken
  char failure[512] = {};
  storage::WriteStats result;
  // The writer's storage calls, marked for the streamer's watchdog (a
  // forked writer's too: it is in the shared mapping).
  storage::StorageProgress progress;
  struct Entry {
    storage::ChunkKey key;
    index_t visibilities = 0;
    bool filled = false;   // copied in: the writer may take it
    bool partial = false;  // its presence bits say which values it carries
    bool has_crc32 = false;
    bool stored = false;      // in the writer's stored form (ChunkQueue::Entry::stored)
    std::uint32_t crc32 = 0;  // a whole chunk's (ChunkQueue::Entry::crc32)
    index_t slot = 0;         // the slot whose memory holds it
  };
  Entry* entries() { return reinterpret_cast<Entry*>(this + 1); }
  // Entries go in order, but slots are taken from a stack of free ones:
  // the pusher fills the slot released last, still in cache (the writer
  // has just read it, or, a writer that keeps up, the pusher made it a
  // chunk ago) rather than the one released a queue ago, long evicted. At
  // 1 MiB chunks that halves the cost of making a chunk in its slot.
  index_t* free_slots() { return reinterpret_cast<index_t*>(entries() + slots); }
  void fail(const std::string& message) {
    failed = true;
    std::snprintf(failure, sizeof(failure), "%s", message.c_str());
    pthread_cond_broadcast(&not_full);
    pthread_cond_broadcast(&not_empty);
  }
  // `rc` of a lock, or of a wait that takes the lock again. The lock is
  // robust: a writer process killed holding it (the OOM killer) leaves it
  // to the next taker, which fails the queue rather than wait forever.
  void taken(int rc) {
    if (rc != EOWNERDEAD) return;
    pthread_mutex_consistent(&lock);
    fail("a writer process died");
  }
  void take() { taken(pthread_mutex_lock(&lock)); }
};

namespace {
template <typename Shared>
class Hold {  // a queue's lock, taken
 public:
  explicit Hold(Shared& s) : s_(s) { s_.take(); }
  ~Hold() { pthread_mutex_unlock(&s_.lock); }

 private:
  Shared& s_;
};
size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}
// The mapping: the header (rounded to a page), every slot's values, then
// every slot's presence bits. A slot's values start on a page whenever a
// chunk's bytes are a multiple of the page (always at 64 KiB and up), so
// an O_DIRECT writer writes straight from the queue, without a copy into
// an aligned buffer (at 1 MiB that copy cost a quarter of the disk's rate).
constexpr size_t kPage = 4096;
template <typename Shared>  // ChunkQueue::Shared, private to it
size_t header_bytes(index_t slots) {
  return round_up(sizeof(Shared) + static_cast<size_t>(slots) *
                                       (sizeof(typename Shared::Entry) + sizeof(index_t)),
                  kPage);
}
size_t values_bytes(index_t chunk_values) {
  return static_cast<size_t>(chunk_values) * sizeof(cplx);
}
}  // namespace

ChunkQueue::ChunkQueue(index_t slots, index_t chunk_values, index_t presence_words,
                       bool across_processes) {
  const size_t header = header_bytes<Shared>(slots);
  bytes_ = header + static_cast<size_t>(slots) *
                        (values_bytes(chunk_values) +
                         static_cast<size_t>(presence_words) * sizeof(storage::PresenceWord));
  // A writer thread's queue is private memory in transparent huge pages
  // where the system allows them (madvise mode): an O_DIRECT write of a
  // chunk then pins a few 2 MiB pages rather than hundreds of 4 KiB ones,
  // which took a quarter of the disk's rate at 1 MiB chunks on the
  // development VM (bench/README.md, "Large chunks"). A writer process's
  // queue must be shared memory, whose huge pages are the administrator's
  // choice (shmem_enabled).
  void* at = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                  (across_processes ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) throw std::runtime_error("cannot map the visibility queue");
  if (!across_processes) madvise(at, bytes_, MADV_HUGEPAGE);  // a hint: no error if refused
  // Touched now: the queue is part of the memory model from the start.
  std::memset(static_cast<char*>(at) + header, 0, bytes_ - header);
  shared_ = new (at) Shared;
  shared_->slots = slots;
  shared_->chunk_values = chunk_values;
  shared_->presence_words = presence_words;
  for (index_t i = 0; i < slots; ++i) shared_->free_slots()[i] = slots - 1 - i;  // slot 0 on top
  shared_->free_count = slots;
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&shared_->lock, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);  // for the timed waits on a writer process
  pthread_cond_init(&shared_->not_full, &ca);
  pthread_cond_init(&shared_->not_empty, &ca);
  pthread_condattr_destroy(&ca);
  storage::rank_progress().add(&shared_->progress);
}

ChunkQueue::~ChunkQueue() {
  // Out of the watchdog's sight before it is unmapped.
  storage::rank_progress().remove(&shared_->progress);
  // Unmapped, not destroyed: pthread_cond_destroy waits for the waiters
  // woken last, and a writer process killed while waiting never answers.
  // The process-shared objects hold nothing outside the mapping.
  munmap(shared_, bytes_);
}

cplx* ChunkQueue::slot(index_t i) const {
  return reinterpret_cast<cplx*>(reinterpret_cast<char*>(shared_) +
                                 header_bytes<Shared>(shared_->slots) +
                                 static_cast<size_t>(i) * values_bytes(shared_->chunk_values));
}

storage::PresenceWord* ChunkQueue::presence(index_t i) const {
  return reinterpret_cast<storage::PresenceWord*>(slot(shared_->slots)) +
         static_cast<size_t>(i) * static_cast<size_t>(shared_->presence_words);
}

namespace {
// Where a full queue's pushers resume: half empty.
index_t refill_mark(index_t slots) {
  return slots / 2;
}

// Whether a child process has ended, without reaping it (Writers::finish
// still collects it).
bool has_exited(pid_t child) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == child;
}
}  // namespace

void ChunkQueue::wait_for_writer() {
  if (writer_ <= 0) {
    shared_->taken(pthread_cond_wait(&shared_->not_full, &shared_->lock));
    return;
  }
  // A writer process killed from outside (the OOM killer) fails nothing:
  // look every 100 ms rather than wait for it forever.
  timespec until{};
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_nsec += 100'000'000;
  if (until.tv_nsec >= 1'000'000'000) until.tv_sec += 1, until.tv_nsec -= 1'000'000'000;
  const int rc = pthread_cond_timedwait(&shared_->not_full, &shared_->lock, &until);
  shared_->taken(rc);
  if (rc == ETIMEDOUT && has_exited(writer_))
    shared_->fail("a writer process (pid " + std::to_string(writer_) + ") died");
}

void ChunkQueue::push(const storage::ChunkKey& key, const cplx* data, index_t visibilities,
                      const storage::PresenceWord* present, storage::StoredForm form) {
  const bool whole = !present && key.row_chunk != kWrittenPartsEntry;
  const index_t n = shared_->chunk_values;
  push_made(
      key, visibilities, present,
      [&](void* values, storage::StoredForm as) {
        // Summed right after the copy or conversion, while in cache.
        if (as == storage::StoredForm::single_conjugated) {
          storage::to_single_conjugated(data, n, static_cast<std::complex<float>*>(values));
          return storage::chunk_crc32(values, n * static_cast<index_t>(sizeof(std::complex<float>)));
        }
        std::memcpy(values, data, static_cast<size_t>(n) * sizeof(cplx));
        return whole ? storage::chunk_crc32(values, n * static_cast<index_t>(sizeof(cplx))) : 0;
      },
      form);
}

void ChunkQueue::push_made(const storage::ChunkKey& key, index_t visibilities,
                           const storage::PresenceWord* present, const chunks::MakeChunk& make,
                           storage::StoredForm form) {
  const bool stored = form != storage::StoredForm::as_given;
  if (stored && (present || key.row_chunk == kWrittenPartsEntry))
    throw std::logic_error("only a whole chunk goes in stored form");
  Hold hold(*shared_);
  if (shared_->count == shared_->slots && !shared_->failed) {
    const auto start = Clock::now();
    while (shared_->count > refill_mark(shared_->slots) && !shared_->failed) wait_for_writer();
    shared_->push_wait_s += seconds_since(start);
  }
  if (shared_->failed) throw std::runtime_error(shared_->failure);
  const index_t i = (shared_->head + shared_->count) % shared_->slots;
  const index_t at = shared_->free_slots()[--shared_->free_count];
  shared_->entries()[i] = {key, visibilities, false, present != nullptr, false, stored, 0, at};
  shared_->high_water = std::max(shared_->high_water, ++shared_->count);
  // The chunk is made without the lock: the writer takes and releases
  // chunks meanwhile (held, it stalled the writer for a copy per chunk).
  pthread_mutex_unlock(&shared_->lock);
  std::uint32_t crc = 0;
  try {
    crc = make(slot(at), form);
  } catch (const std::exception& e) {  // the slot stays taken: the queue fails
    shared_->take();
    shared_->fail(std::string("making a chunk: ") + e.what());
    throw;
  }
  if (present)
    std::memcpy(presence(at), present,
                static_cast<size_t>(shared_->presence_words) * sizeof(storage::PresenceWord));
  const bool whole = !present && key.row_chunk != kWrittenPartsEntry;
  shared_->take();
  shared_->entries()[i].filled = true;
  shared_->entries()[i].has_crc32 = whole;
  shared_->entries()[i].crc32 = whole ? crc : 0;
  // The writer may be waiting for any entry, not only the oldest: it
  // looks ahead of its releases (peek_at). Cheap when nobody waits.
  pthread_cond_signal(&shared_->not_empty);
}

ChunkQueue::Peek ChunkQueue::peek(Entry& entry, int wait_ms) {
  return peek_at(-1, entry, wait_ms);
}

ChunkQueue::Peek ChunkQueue::peek_at(index_t number, Entry& entry, int wait_ms) {
  Hold hold(*shared_);
  const auto wanted = [&] { return number < 0 ? shared_->released : number; };
  if (number >= 0 && number < shared_->released)
    throw std::logic_error("a queue entry looked at after its release");
  const auto waiting = [&] {
    const index_t ahead = wanted() - shared_->released;  // entries before it, not released
    return (ahead >= shared_->count && !shared_->closed) ||
           (ahead < shared_->count &&
            !shared_->entries()[(shared_->head + ahead) % shared_->slots].filled);
  };
  timespec until{};
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += wait_ms / 1000;
  until.tv_nsec += (wait_ms % 1000) * 1'000'000L;
  if (until.tv_nsec >= 1'000'000'000) until.tv_sec += 1, until.tv_nsec -= 1'000'000'000;
  while (waiting() && !shared_->failed) {
    if (wait_ms < 0) {
      shared_->taken(pthread_cond_wait(&shared_->not_empty, &shared_->lock));
      continue;
    }
    const int rc = pthread_cond_timedwait(&shared_->not_empty, &shared_->lock, &until);
    shared_->taken(rc);
    if (rc == ETIMEDOUT && waiting() && !shared_->failed) return Peek::timeout;
  }
  const index_t ahead = wanted() - shared_->released;
  if (ahead >= shared_->count || shared_->failed) return Peek::closed;
  // Pushers fill only slots past head + count: this one stays put.
  const index_t i = (shared_->head + ahead) % shared_->slots;
  const auto& e = shared_->entries()[i];
  entry = {e.key, slot(e.slot), e.partial ? presence(e.slot) : nullptr, e.visibilities,
           e.has_crc32 ? &e.crc32 : nullptr, e.stored};
  return Peek::chunk;
}

void ChunkQueue::release() {
  Hold hold(*shared_);
  const auto& e = shared_->entries()[shared_->head];
  shared_->free_slots()[shared_->free_count++] = e.slot;
  if (e.key.row_chunk != kWrittenPartsEntry)
    shared_->taken_bytes += e.visibilities * static_cast<index_t>(sizeof(cplx));
  shared_->head = (shared_->head + 1) % shared_->slots;
  ++shared_->released;
  if (--shared_->count == refill_mark(shared_->slots)) pthread_cond_broadcast(&shared_->not_full);
}

bool ChunkQueue::pop(storage::ChunkKey& key, cplx* data, index_t& visibilities) {
  Entry e;
  if (peek(e) != Peek::chunk) return false;
  key = e.key;
  visibilities = e.visibilities;
  std::memcpy(data, e.data, static_cast<size_t>(shared_->chunk_values) * sizeof(cplx));
  release();
  return true;
}

void ChunkQueue::mark_opened() {
  Hold hold(*shared_);
  shared_->opened = true;
  pthread_cond_broadcast(&shared_->not_full);  // pushers re-check and wait on
}

std::string ChunkQueue::wait_opened() {
  Hold hold(*shared_);
  while (!shared_->opened && !shared_->failed) wait_for_writer();
  return shared_->failed ? shared_->failure : "";
}

void ChunkQueue::close() {
  Hold hold(*shared_);
  shared_->closed = true;
  pthread_cond_broadcast(&shared_->not_empty);
}

void ChunkQueue::fail(const std::string& message) {
  Hold hold(*shared_);
  shared_->fail(message);
}

void ChunkQueue::set_result(const storage::WriteStats& stats) {
  Hold hold(*shared_);
  shared_->result = stats;
}
storage::WriteStats ChunkQueue::result() const {
  Hold hold(*shared_);
  return shared_->result;
}
std::string ChunkQueue::failure() const {
  Hold hold(*shared_);
  return shared_->failed ? shared_->failure : "";
}
index_t ChunkQueue::taken_bytes() const {
  Hold hold(*shared_);
  return shared_->taken_bytes;
}
index_t ChunkQueue::high_water() const {
  Hold hold(*shared_);
  return shared_->high_water;
}
storage::StorageProgress& ChunkQueue::progress() {
  return shared_->progress;
}
double ChunkQueue::push_wait_s() const {
  Hold hold(*shared_);
  return shared_->push_wait_s;
}

namespace {
// Calls `carried(begin, end)` for each stretch of values whose presence
// words are not all zero and `absent(begin, end)` for the rest, in runs of
// whole words (64 values; the last run ends at `layout.chunk_values()`).
template <typename Carried, typename Absent>
void for_present_words(const storage::VisibilityLayout& layout,
                       const storage::PresenceWord* present, Carried carried, Absent absent) {
  const index_t values = layout.chunk_values(), words = layout.presence_words();
  for (index_t w = 0; w < words;) {
    const bool some = present[w] != 0;
    index_t v = w + 1;
    while (v < words && (present[v] != 0) == some) ++v;
    const index_t begin = w * 64, end = std::min(values, v * 64);
    if (some)
      carried(begin, end);
    else
      absent(begin, end);
    w = v;
  }
}
}  // namespace

PartialChunks::PartialChunks(const storage::VisibilityLayout& layout, index_t slots, bool lend)
    : layout_(layout), slots_(slots), lend_(lend) {
  // Every slot's buffer now: held parts are part of the memory model from the start.
  for (index_t i = 0; i < slots + (lend && slots > 0 ? 1 : 0); ++i) {
    Part part;
    part.values = AlignedBuffer(layout.chunk_values());
    part.present.assign(static_cast<size_t>(layout.presence_words()), 0);
    spare_.push_back(std::move(part));
  }
}

index_t PartialChunks::index(const storage::ChunkKey& key) const {
  return key.row_chunk * layout_.freq_chunks() + key.freq_chunk;
}

void PartialChunks::write_out(index_t chunk, const Write& write) {
  const auto at = held_.find(chunk);
  const storage::ChunkKey key{chunk / layout_.freq_chunks(), chunk % layout_.freq_chunks()};
  const bool complete = at->second.visibilities >= storage::visibilities_inside(layout_, key);
  write(key, at->second.values.data(), at->second.visibilities,
        complete ? nullptr : at->second.present.data());
  // Moved, not copied: the buffers (what `write` was given) stay put.
  (lend_ ? lent_.emplace_back(std::move(at->second)) : spare_.emplace_back(std::move(at->second)));
  held_.erase(at);
}

void PartialChunks::returned() {
  if (lent_.empty()) throw std::logic_error("a chunk buffer returned that was not lent");
  spare_.push_back(std::move(lent_.front()));
  lent_.pop_front();
}

void PartialChunks::add(const storage::ChunkKey& key, const cplx* data, index_t visibilities,
                        const storage::PresenceWord* present, const Write& write) {
  const index_t chunk = index(key);
  const auto words = static_cast<size_t>(layout_.presence_words());
  auto at = held_.find(chunk);
  if (at == held_.end()) {
    if (visibilities >= storage::visibilities_inside(layout_, key)) {
      write(key, data, visibilities, nullptr);  // whole: every value present
      return;
    }
    if (slots_ < 1 || let_go_.count(chunk)) {
      write(key, data, visibilities, present);
      return;
    }
    while (static_cast<index_t>(held_.size()) >= slots_) {  // the oldest goes as it is
      const index_t oldest = order_.front();
      order_.pop_front();
      if (!held_.count(oldest)) continue;  // written whole since
      let_go_.insert(oldest);
      write_out(oldest, write);
    }
    if (spare_.empty()) throw std::logic_error("no free buffer for a part (wait for a return)");
    Part part = std::move(spare_.back());
    spare_.pop_back();
    if (!present)  // all present, yet less than whole: cannot be
      throw std::logic_error("a part of a chunk without its presence bits");
    part.present.assign(present, present + words);
    // The words it carries copied, zeros elsewhere (cheaper than reading them).
    for_present_words(
        layout_, present,
        [&](index_t begin, index_t end) {
          std::copy(data + begin, data + end, part.values.data() + begin);
        },
        [&](index_t begin, index_t end) {
          std::fill(part.values.data() + begin, part.values.data() + end, cplx{});
        });
    part.visibilities = visibilities;
    held_.emplace(chunk, std::move(part));
    order_.push_back(chunk);
    return;
  }
  auto& part = at->second;
  if (!present) throw std::logic_error("a part of a chunk without its presence bits");
  // Only the words of 64 values the part carries: elsewhere it is zero,
  // and a part is often a small piece of a large chunk (one subgrid's
  // stretch of a 1 MiB chunk), so the writer's adds stay proportional to
  // the visibilities, not to the parts times the chunk.
  for (size_t w = 0; w < words; ++w) part.present[w] |= present[w];
  for_present_words(
      layout_, present,
      [&](index_t begin, index_t end) {
        for (index_t i = begin; i < end; ++i) part.values.data()[i] += data[i];
      },
      [](index_t, index_t) {});
  part.visibilities += visibilities;
  if (part.visibilities >= storage::visibilities_inside(layout_, key)) write_out(chunk, write);
}

void PartialChunks::flush(const Write& write) {
  for (const index_t chunk : order_)
    if (held_.count(chunk)) write_out(chunk, write);
  order_.clear();
}

namespace {

// How long a shared output's writer waits for a chunk before it takes part
// in its peers' collective calls with what it has.
constexpr int kIdleMs = 2;

// A writer's I/O on a thread of its own: the back-end's calls, one at a
// time and in the order given, while the writer's loop takes the next
// entries from the queue and merges parts. The disk then always has the
// next write as soon as the last is done (one I/O at a time, as fio's
// psync), and the writer's own work (copies, adds, checksums of merged
// chunks, the queue's handshakes) happens meanwhile, not between writes:
// at 1 MiB chunks that work cost a single writer a fifth of the disk.
// Queue entries are released by this thread, in order, once what was in
// them is written.
class WriterIo {
 public:
  // `name`: the output, said with a failure.
  WriterIo(storage::Backend& backend, ChunkQueue& queue, std::string name)
      : backend_(backend), queue_(queue), name_(std::move(name)), thread_([this] { run(); }) {}
  // Without drain(): what was not yet done is dropped (the run is stopping).
  ~WriterIo() {
    {
      const std::lock_guard<std::mutex> hold(lock_);
      jobs_.clear();
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  WriterIo(const WriterIo&) = delete;
  WriterIo& operator=(const WriterIo&) = delete;

  // `lent`: `data` is a PartialChunks buffer, returned once written.
  // `stored`: in the back-end's stored form (ChunkQueue::Entry::stored).
  void write(const storage::ChunkKey& key, const cplx* data, index_t n,
             const storage::PresenceWord* present, const std::uint32_t* crc32, bool lent,
             bool stored = false) {
    give({Job::write, key, data, n, present,
          crc32 ? std::optional<std::uint32_t>(*crc32) : std::nullopt, lent, stored});
  }
  void release() { give({Job::release}); }
  // A shared output's idle call, unless the thread is busy anyway.
  void idle() {
    {
      const std::lock_guard<std::mutex> hold(lock_);
      if (!jobs_.empty()) return;
    }
    give({Job::idle});
  }
  // Lent buffers written since the last call; with `block`, at least one.
  index_t returned(bool block) {
    std::unique_lock<std::mutex> hold(lock_);
    if (block) changed_.wait(hold, [&] { return returned_ > 0 || failure_; });
    rethrow();
    return std::exchange(returned_, 0);
  }
  // Waits for everything given; throws what stopped the thread.
  void drain() {
    std::unique_lock<std::mutex> hold(lock_);
    changed_.wait(hold, [&] { return (jobs_.empty() && !busy_) || failure_; });
    rethrow();
  }

 private:
  struct Job {
    enum Kind { write, release, idle } kind;
    storage::ChunkKey key{};
    const cplx* data = nullptr;
    index_t n = 0;
    const storage::PresenceWord* present = nullptr;
    std::optional<std::uint32_t> crc32 =
        std::nullopt;  // the pusher's (a copy: the slot may go first)
    bool lent = false;
    bool stored = false;
  };
  void give(const Job& job) {
    {
      const std::lock_guard<std::mutex> hold(lock_);
      rethrow();
      jobs_.push_back(job);
    }
    changed_.notify_all();
  }
  void rethrow() {  // the lock held
    if (failure_) std::rethrow_exception(failure_);
  }
  void run() {
    std::unique_lock<std::mutex> hold(lock_);
    for (;;) {
      changed_.wait(hold, [&] { return !jobs_.empty() || stop_; });
      if (jobs_.empty() || failure_) return;  // stopped
      const Job job = jobs_.front();
      jobs_.pop_front();
      busy_ = true;
      hold.unlock();
      std::exception_ptr failed;
      try {
        if (job.kind == Job::write)
          backend_.write_chunk(job.key, job.data, job.n, job.present,
                               job.crc32 ? &*job.crc32 : nullptr, job.stored);
        else if (job.kind == Job::release)
          queue_.release();
        else
          backend_.idle();
      } catch (const std::exception& e) {
        failed = std::current_exception();
        // The pushers and the writer's loop stop waiting.
        queue_.fail(name_.empty() ? e.what() : name_ + ": " + e.what());
      }
      hold.lock();
      busy_ = false;
      if (failed) failure_ = failed;
      if (job.kind == Job::write && job.lent) ++returned_;
      changed_.notify_all();
      if (failure_) return;
    }
  }

  storage::Backend& backend_;
  ChunkQueue& queue_;
  const std::string name_;
  std::mutex lock_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  bool stop_ = false, busy_ = false;
  std::exception_ptr failure_;
  index_t returned_ = 0;
  std::thread thread_;  // last: started once the rest is ready
};

// Takes the queue's entries in order, ahead of their release: chunks go to
// the I/O thread from their slots (no copy), parts are merged in the held
// buffers, written-part records gathered. Returns those records.
std::vector<storage::WrittenPart> take_entries(ChunkQueue& queue, WriterIo& io,
                                               PartialChunks& partial, index_t chunk_bytes,
                                               int wait_ms) {
  ChunkQueue::Entry e;
  // The pusher's checksum goes with the very bytes it was computed on. A
  // chunk merged whole from parts is summed here, while the I/O thread
  // writes the one before (summed there, it delayed every next write); a
  // part written as it is, the back-end sums with what it holds.
  const auto write = [&](const storage::ChunkKey& key, const cplx* data, index_t n,
                         const storage::PresenceWord* present) {
    const bool from_slot = data == e.data;
    std::uint32_t merged = 0;
    if (!from_slot && !present) merged = storage::chunk_crc32(data, chunk_bytes);
    io.write(key, data, n, present, from_slot ? e.crc32 : present ? nullptr : &merged, !from_slot);
  };
  std::vector<char> parts;  // WrittenPart records, as they came
  for (index_t number = 0;;) {
    // A part may need a free buffer: wait for the I/O thread to return one.
    for (index_t n = io.returned(!partial.has_spare() && partial.lent() > 0); n > 0; --n)
      partial.returned();
    const auto got = queue.peek_at(number, e, wait_ms);
    if (got == ChunkQueue::Peek::closed) break;
    if (got == ChunkQueue::Peek::timeout) {
      io.idle();
      continue;
    }
    if (e.key.row_chunk == kWrittenPartsEntry) {
      const auto* bytes = reinterpret_cast<const char*>(e.data);
      parts.insert(parts.end(), bytes, bytes + e.visibilities);
    } else if (e.stored) {  // whole and ready: from its slot, with the pusher's checksum
      io.write(e.key, e.data, e.visibilities, nullptr, e.crc32, false, true);
    } else {
      partial.add(e.key, e.data, e.visibilities, e.present, write);
    }
    io.release();
    ++number;
  }
  if (queue.failure().empty()) partial.flush(write);
  std::vector<storage::WrittenPart> records(parts.size() / sizeof(storage::WrittenPart));
  std::memcpy(records.data(), parts.data(), records.size() * sizeof(storage::WrittenPart));
  return records;
}

// One writer's whole life: open, write what comes, close. Failures go to
// the queue (pushers see them and stop) and leave no complete-looking output.
void run_writer(ChunkQueue& queue, const storage::StorageChoice& storage, const std::string& path,
                const std::string& partial, const storage::VisibilityLayout& layout,
                index_t partial_slots, MPI_Comm shared) {
  std::unique_ptr<storage::Backend> backend;
  try {
    backend = storage.make();
    backend->watch(&queue.progress());
    if (shared != MPI_COMM_NULL) backend->share(shared);
    backend->open(partial, layout);
    // A shared output's writers meet in collective calls: one with nothing
    // to write looks in on them every few milliseconds (idle()).
    const int wait_ms = backend->meets_others() ? kIdleMs : -1;
    std::vector<storage::WrittenPart> records;
    {
      // The held parts' buffers, touched before the run starts (it waits
      // for mark_opened): made once the chunks flowed, their page faults
      // held a null writer up long enough to fill its queue.
      PartialChunks partial(layout, partial_slots, /*lend=*/true);
      queue.mark_opened();
      WriterIo io(*backend, queue, path);  // joined before the back-end is touched again
      records = take_entries(queue, io, partial, layout.chunk_bytes(), wait_ms);
      if (queue.failure().empty()) io.drain();
    }
    if (!queue.failure().empty()) {  // stopped from outside: no complete-looking output
      backend->abort();
      return;
    }
    if (!records.empty()) backend->set_written_parts(std::move(records));
    backend->complete();  // published by the owner of the Writers
    queue.set_result(backend->stats());
  } catch (const std::exception& e) {
    if (backend) backend->abort();
    queue.fail(path.empty() ? e.what() : path + ": " + e.what());
  }
}

}  // namespace

Writers::Writers(const WriterOptions& options, const storage::VisibilityLayout& layout)
    : options_(options), layout_(layout) {
  if (options_.queue_slots < 1) throw std::logic_error("a writer queue needs a slot");
  if (options_.partials.size() != options_.paths.size())
    throw std::logic_error("a writer without where to write");
  for (size_t i = 0; i < options_.paths.size(); ++i)
    file_layouts_.push_back(
        options_.split.layout_of_file(layout, options_.first_file + static_cast<index_t>(i)));
  for (size_t i = 0; i < options_.paths.size(); ++i) {
    queues_.push_back(std::make_unique<ChunkQueue>(options_.queue_slots, layout.chunk_values(),
                                                   layout.presence_words(), options_.fork));
    start(i);
  }
}

void Writers::start(size_t i) {
  auto& queue = *queues_[i];
  const auto& path = options_.paths[i];
  if (options_.consumer) {
    threads_.emplace_back([this, &queue] { options_.consumer(queue); });
    return;
  }
  if (!options_.fork) {
    threads_.emplace_back([this, &queue, path, i] {
      run_writer(queue, options_.storage, path, options_.partials[i], file_layouts_[i],
                 options_.partial_slots, options_.shared);
    });
    return;
  }
  std::fflush(nullptr);  // nothing buffered twice
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("cannot fork a writer process");
  if (child == 0) {
    // Killed with its streamer (mpirun ending the job): an orphan would wait
    // on the queue forever. The signal comes when the forking thread ends,
    // and the Writers' owner outlives them.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the streamer died before prctl
    // The child writes and leaves without running the parent's exit
    // handlers (MPI's among them).
    run_writer(queue, options_.storage, path, options_.partials[i], file_layouts_[i],
               options_.partial_slots, MPI_COMM_NULL);
    _exit(queue.failure().empty() ? 0 : 1);
  }
  children_.push_back(child);
  queue.watch(child);
}

ChunkQueue& Writers::queue_of(const storage::ChunkKey& key) {
  // By row chunk: each writer's file holds whole row chunks. Split by
  // frequency: the writer of the chunk's file (the run routes only its own
  // files' chunks here).
  const auto n = static_cast<index_t>(queues_.size());
  index_t writer = key.row_chunk % n;
  if (options_.split.by_frequency() && !options_.consumer) {
    writer = options_.split.file_of(key.freq_chunk) - options_.first_file;
    if (writer < 0 || writer >= n)
      throw std::logic_error(fmt::format("frequency chunk {} is for output {}, not one of this "
                                         "rank's {} from {}",
                                         key.freq_chunk, writer + options_.first_file, n,
                                         options_.first_file));
  }
  return *queues_[static_cast<size_t>(writer)];
}

storage::StoredForm Writers::form_of(const storage::ChunkKey& key,
                                     const storage::PresenceWord* present) const {
  // A consumer forwards chunks as given; a part, or a chunk on the edge
  // (its stored cells fewer), goes as given too.
  if (options_.consumer || present || !storage::inside_edges(layout_, key))
    return storage::StoredForm::as_given;
  return options_.stored_form;
}

void Writers::write(const storage::ChunkKey& key, const cplx* data, index_t visibilities,
                    const storage::PresenceWord* present) {
  queue_of(key).push(key, data, visibilities, present, form_of(key, present));
}

void Writers::write_made(const storage::ChunkKey& key, index_t visibilities,
                         const storage::PresenceWord* present, const chunks::MakeChunk& make) {
  queue_of(key).push_made(key, visibilities, present, make, form_of(key, present));
}

void Writers::wait_opened() {
  for (auto& queue : queues_)
    if (const auto failure = queue->wait_opened(); !failure.empty())
      throw std::runtime_error(failure);
}

void Writers::record_written(const std::vector<storage::WrittenPart>& parts) {
  const auto* bytes = reinterpret_cast<const char*>(parts.data());
  const size_t total = parts.size() * sizeof(storage::WrittenPart);
  const size_t per_entry = static_cast<size_t>(layout_.chunk_bytes());
  std::vector<cplx> entry(static_cast<size_t>(layout_.chunk_values()));
  for (auto& queue : queues_)
    for (size_t at = 0; at < total; at += per_entry) {
      const size_t n = std::min(per_entry, total - at);
      std::memcpy(entry.data(), bytes + at, n);
      queue->push({kWrittenPartsEntry, 0}, entry.data(), static_cast<index_t>(n));
    }
}

void Writers::fail(const std::string& message) {
  for (auto& queue : queues_) queue->fail(message);
}

std::vector<storage::WriteStats> Writers::finish() {
  finished_ = true;
  for (auto& q : queues_) q->close();
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::string failure;
  for (size_t i = 0; i < children_.size(); ++i) {
    int status = 0;
    waitpid(children_[i], &status, 0);
    if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && queues_[i]->failure().empty())
      failure = options_.paths[i] + ": the writer process died";
  }
  children_.clear();
  std::vector<storage::WriteStats> stats;
  for (auto& q : queues_) {
    if (failure.empty()) failure = q->failure();
    stats.push_back(q->result());
  }
  if (!failure.empty()) throw std::runtime_error(failure);
  return stats;
}

Writers::~Writers() {
  if (finished_) return;
  // Failing elsewhere: stop the writers; each drops its partial output.
  for (auto& q : queues_) q->fail("stopped");
  for (auto& q : queues_) q->close();
  for (auto& t : threads_) t.join();
  for (const pid_t child : children_) waitpid(child, nullptr, 0);
}

index_t Writers::taken_bytes() const {
  index_t bytes = 0;
  for (const auto& q : queues_) bytes += q->taken_bytes();
  return bytes;
}

index_t Writers::high_water() const {
  index_t h = 0;
  for (const auto& q : queues_) h = std::max(h, q->high_water());
  return h;
}

double Writers::wait_s() const {
  double s = 0;
  for (const auto& q : queues_) s += q->push_wait_s();
  return s;
}

std::string with_host(std::string pattern, const std::string& host) {
  for (auto at = pattern.find("%h"); at != std::string::npos;
       at = pattern.find("%h", at + host.size()))
    pattern.replace(at, 2, host);
  return pattern;
}

std::string output_path(const std::string& host_pattern, index_t index, index_t writers_in_all) {
  // %h: this host's name, for node-local storage (/local/%h/vis%d.h5).
  const std::string pattern = with_host(host_pattern, host_name());
  const auto at = pattern.find("%d");
  if (at != std::string::npos)
    return pattern.substr(0, at) + std::to_string(index) + pattern.substr(at + 2);
  if (writers_in_all <= 1) return pattern;
  return storage::before_extension(pattern, fmt::format(".{}", index));
}

}  // namespace iotest::pipeline
