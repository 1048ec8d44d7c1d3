// Writers: each takes whole chunks from its own bounded queue and writes
// one output through a storage back-end, as a thread of the streamer or as
// a forked process (--fork-writer: the serial HDF5 library lets one thread
// in at a time, DESIGN.md section 5). The queue lives in shared memory
// either way, so both kinds run the same code. MPI only through a shared
// output's back-end (phdf5), whose writers are threads: a forked writer
// never calls it.
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "iotest/chunks/chunk_assembler.hpp"
#include "iotest/common/array.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/registry.hpp"

namespace iotest::pipeline {

// A bounded queue of chunks in memory a forked writer shares (mmap, shared
// pthread mutex and conditions), private for a writer thread. push blocks while full: that is the
// back-pressure writers put on degridding.
class ChunkQueue {
 public:
  // Each slot holds a chunk's values and its presence bits.
  // `across_processes`: shared with a forked writer (else private memory).
  ChunkQueue(index_t slots, index_t chunk_values, index_t presence_words, bool across_processes);
  ~ChunkQueue();
  ChunkQueue(const ChunkQueue&) = delete;
  ChunkQueue& operator=(const ChunkQueue&) = delete;

  // Copies a chunk in, waiting for a free slot. Throws if the writer failed.
  // A pusher that finds the queue full sleeps until it is half empty, so a
  // writer draining a full queue wakes it once per half queue, not once per
  // chunk (on 2 cores the wake-ups cost the writer a third of its speed).
  // `present` may be nullptr: every value inside the observation.
  // `form`: not as_given for a whole chunk inside the edges whose writer
  // stores it so: converted as it is copied in, its CRC-32 of the stored
  // bytes (the writer then neither converts nor sums it).
  void push(const storage::ChunkKey& key, const cplx* data, index_t visibilities,
            const storage::PresenceWord* present = nullptr,
            storage::StoredForm form = storage::StoredForm::as_given);
  // The same with the chunk made in its slot: `make` writes the values
  // there in `form` (no copy, no buffer of the pusher's) and returns their
  // CRC-32, kept for a whole chunk (`present` nullptr) as push's is.
  void push_made(const storage::ChunkKey& key, index_t visibilities,
                 const storage::PresenceWord* present, const chunks::MakeChunk& make,
                 storage::StoredForm form = storage::StoredForm::as_given);
  // The oldest chunk, in place (no copy), until release(). One consumer
  // (the writer).
  struct Entry {
    storage::ChunkKey key;
    const cplx* data = nullptr;
    const storage::PresenceWord* present = nullptr;  // nullptr: all
    index_t visibilities = 0;
    // A whole chunk's CRC-32, computed by its pusher right after copying
    // it in (hot in cache): the writer's I/O is not held up by reading the
    // chunk again (at 1 MiB, a cold read cost a tenth of the disk's rate).
    const std::uint32_t* crc32 = nullptr;
    // Whole, inside the edges and in its writer's stored form (push's `form`).
    bool stored = false;
  };
  enum class Peek { chunk, closed, timeout };
  // Waits for a chunk: `closed` once closed and empty (or failed);
  // `timeout` after `wait_ms` without one (-1: wait as long as it takes).
  Peek peek(Entry& entry, int wait_ms = -1);
  // The same for entry `number` (counted from the queue's first, 0): a
  // consumer may look ahead of the entries it has not yet released.
  Peek peek_at(index_t number, Entry& entry, int wait_ms = -1);
  // Frees the oldest entry.
  void release();
  // Takes the oldest chunk's values (a copy); false once closed and empty.
  bool pop(storage::ChunkKey& key, cplx* data, index_t& visibilities);
  // The writer has opened its output; wait_opened() returns once it has
  // (or failed: then with the failure).
  void mark_opened();
  std::string wait_opened();
  // No more chunks will come.
  void close();
  // The writer gave up: pushers throw `message` from now on.
  void fail(const std::string& message);
  // The queue's writer is this child process: a pusher waiting on a full
  // queue checks that it is alive, since a killed writer fails nothing.
  void watch(pid_t writer) { writer_ = writer; }
  // Filled in by the writer when it ends, read by the streamer.
  void set_result(const storage::WriteStats& stats);
  storage::WriteStats result() const;
  std::string failure() const;
  index_t high_water() const;
  double push_wait_s() const;   // time pushers spent waiting for a slot
  index_t taken_bytes() const;  // visibilities' bytes in the chunks taken so far
  // Its writer's storage calls' marks, in the queue's memory (shared with
  // a forked writer), in the rank's progress table while the queue lives.
  storage::StorageProgress& progress();

 private:
  struct Shared;
  Shared* shared_ = nullptr;
  size_t bytes_ = 0;
  pid_t writer_ = 0;  // a forked writer (0: a thread)
  cplx* slot(index_t i) const;
  storage::PresenceWord* presence(index_t i) const;  // the slot's bits, after its values
  void wait_for_writer();                            // once on not_full, the lock held
};

// A queue entry carrying written parts (bytes of WrittenPart records,
// `visibilities` of them), not a chunk: they travel as chunks do, since
// the writer may be another process or, in transit, another rank.
inline constexpr index_t kWrittenPartsEntry = -1;

struct WriterOptions {
  storage::StorageChoice storage;   // the back-end, resolved once, and its options
  std::vector<std::string> paths;   // one output per writer
  std::vector<std::string> partials;  // where each writes until published (its claim's)
  // How the run's outputs divide the observation; split by frequency,
  // writer i writes the run's output first_file + i, and each chunk goes
  // to the writer of its file.
  storage::FileSplit split;
  index_t first_file = 0;
  index_t queue_slots = 64;         // chunks waiting, per writer
  index_t partial_slots = 0;        // parts of chunks held until whole, per writer (0: none)
  // How the back-end stores values: whole chunks inside the edges are
  // handed to it so (converted or made by the pusher). Not for a consumer.
  storage::StoredForm stored_form = storage::StoredForm::as_given;
  bool fork = false;                // processes instead of threads
  // A back-end whose one output all streamers share (phdf5): the
  // streamers' communicator, for its one writer per streamer (a thread).
  MPI_Comm shared = MPI_COMM_NULL;
  // In transit: each queue's thread runs this instead of writing (it sends
  // the chunks to the writer group; transit.hpp), with `paths` empty names.
  std::function<void(ChunkQueue&)> consumer;
};

// A chunk whose runs fall in several subgrids (or w-stacks) arrives in
// parts, zeros elsewhere. Written as they come, every part after the first
// is a rewrite: read back, add, write again (a tenth of the chunks of
// vlaa's default observation). The writer holds parts here instead and
// writes each chunk once, whole. Bounded: when `slots` chunks are held,
// the oldest goes to storage as it is and its later parts are rewrites, as
// are, at the end, parts of chunks shared with other streamers.
class PartialChunks {
 public:
  using Write = std::function<void(const storage::ChunkKey&, const cplx*, index_t,
                                   const storage::PresenceWord*)>;
  // `lend`: `write` may go on using a chunk's buffer after it returns (a
  // writer's I/O thread writes it later): the buffer stays lent until
  // returned(), and one buffer more than `slots` lets a part be taken in
  // while another is being written.
  PartialChunks(const storage::VisibilityLayout& layout, index_t slots, bool lend = false);
  // A chunk or part of one (`present`: which values; nullptr: all); whole
  // chunks go to `write` (at once, or once their last part has come).
  void add(const storage::ChunkKey& key, const cplx* data, index_t visibilities,
           const storage::PresenceWord* present, const Write& write);
  // Writes the parts still held.
  void flush(const Write& write);
  index_t held() const { return static_cast<index_t>(held_.size()); }
  // Lending: the oldest buffer handed to `write` is free again. add()
  // needs a free buffer: while has_spare() is false, wait for a return.
  void returned();
  index_t lent() const { return static_cast<index_t>(lent_.size()); }
  bool has_spare() const { return !spare_.empty(); }

 private:
  struct Part {
    AlignedBuffer values;  // page-aligned: O_DIRECT writes it without a copy
    std::vector<storage::PresenceWord> present;
    index_t visibilities = 0;
  };
  index_t index(const storage::ChunkKey& key) const;
  void write_out(index_t chunk, const Write& write);
  storage::VisibilityLayout layout_;
  index_t slots_;
  std::unordered_map<index_t, Part> held_;  // by chunk index
  std::deque<index_t> order_;               // held chunks, oldest first (some since written)
  std::unordered_set<index_t> let_go_;      // written in part: later parts go straight on
  std::vector<Part> spare_;                 // buffers of written parts, for reuse
  bool lend_ = false;
  std::deque<Part> lent_;  // handed to `write`, oldest first, until returned()
};

// The writers of one streamer (or writer rank). Chunk (r, f) always goes
// to the same writer, so its rewrites accumulate in one file: by row chunk,
// or, split by frequency, the writer of its frequency chunk's file.
class Writers {
 public:
  Writers(const WriterOptions& options, const storage::VisibilityLayout& layout);
  ~Writers();  // stops and drops the outputs if finish() was not called
  // Returns once every writer has opened its output; throws the first
  // failure to.
  void wait_opened();
  void write(const storage::ChunkKey& key, const cplx* data, index_t visibilities,
             const storage::PresenceWord* present = nullptr);
  // A chunk made in its writer's queue (ChunkQueue::push_made).
  void write_made(const storage::ChunkKey& key, index_t visibilities,
                  const storage::PresenceWord* present, const chunks::MakeChunk& make);
  // A stonewalled run: the parts every output holds, stored with it. After
  // the last chunk, before finish().
  void record_written(const std::vector<storage::WrittenPart>& parts);
  // Fails every queue: pushers throw `message` from then on (a streamer's
  // exchange failed: its forwarder gives up too).
  void fail(const std::string& message);
  // Closes the queues, waits for the writers and returns their stats;
  // throws the first writer's failure. The outputs are complete but keep
  // their temporary names until storage::publish: a run publishes them
  // only once every rank has finished.
  std::vector<storage::WriteStats> finish();
  index_t high_water() const;  // over the queues
  double wait_s() const;       // pushers waiting on full queues
  // Visibilities' bytes the writers (in transit: the forwarder) have taken
  // so far: the time line's writing rate, read while they run.
  index_t taken_bytes() const;

 private:
  void start(size_t i);
  ChunkQueue& queue_of(const storage::ChunkKey& key);  // its writer's
  // The form chunk `key` goes in: the back-end's for a whole chunk inside
  // the edges, as given otherwise.
  storage::StoredForm form_of(const storage::ChunkKey& key,
                              const storage::PresenceWord* present) const;
  WriterOptions options_;
  storage::VisibilityLayout layout_;
  std::vector<storage::VisibilityLayout> file_layouts_;  // per writer: its file's
  std::vector<std::unique_ptr<ChunkQueue>> queues_;
  std::vector<std::thread> threads_;
  std::vector<pid_t> children_;
  bool finished_ = false;
};

// `pattern` with its %d replaced by `index`; without %d, ".<index>" goes
// before the extension when there are several writers in all.
// %h: `host` in place of every %h.
std::string with_host(std::string pattern, const std::string& host);
std::string output_path(const std::string& pattern, index_t index, index_t writers_in_all);

}  // namespace iotest::pipeline
