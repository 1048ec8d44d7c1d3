// In-transit writers: a streamer's forwarding thread and a writer rank's
// role. See transit.hpp for the protocol and why it cannot deadlock.
#include "iotest/pipeline/transit.hpp"

#include <algorithm>
#include <cstring>

#include "iotest/common/mpi_wait.hpp"
#include "iotest/common/system.hpp"

namespace iotest::pipeline {
namespace {

// While sends are in flight the forwarder looks at them every millisecond
// it has no chunk: MPI moves a message over shared memory in fragments
// only while its sender calls into the library.
constexpr int kPollMs = 1;

// A message buffer, aligned for the values after the header.
struct MessageBuffer {
  std::vector<std::uint64_t> words;
  explicit MessageBuffer(index_t bytes) : words(static_cast<size_t>((bytes + 7) / 8)) {}
  char* data() { return reinterpret_cast<char*>(words.data()); }
};

// Message slots: a buffer each and the request (a send or a receive) on
// it; kept by a failing rank while in flight (keep_while_in_flight).
struct MessageSlots {
  std::vector<MessageBuffer> buffers;
  std::vector<MPI_Request> requests;
  MessageSlots(index_t slots, index_t bytes)
      : buffers(static_cast<size_t>(slots), MessageBuffer(bytes)),
        requests(static_cast<size_t>(slots), MPI_REQUEST_NULL) {}
  ~MessageSlots() { keep_while_in_flight(requests, buffers); }
  MessageSlots(const MessageSlots&) = delete;
  MessageSlots& operator=(const MessageSlots&) = delete;

  int size() const { return static_cast<int>(requests.size()); }
};

// A streamer's forwarding thread: --transit-queue message slots, each a
// buffer and the synchronous send (MPI_Issend) that carries it to a writer
// rank; a slot is free again once its send is matched and complete.
class Forwarder {
 public:
  Forwarder(MPI_Comm comm, const ChunkRoute& route, index_t slots,
            const storage::VisibilityLayout& layout, TransitTally& tally, ChunkQueue& queue,
            Writers* own)
      : comm_(comm),
        route_(route),
        queue_(queue),
        layout_(layout),
        tally_(tally),
        own_(own),
        slots_(slots, transit_message_bytes(layout)),
        done_(static_cast<size_t>(slots)) {
    MPI_Comm_rank(comm, &rank_);
  }
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // Until the queue is closed: each chunk (or written-parts record) to its
  // writer rank(s); then, unless the streamer is failing, the last sends
  // and this streamer's end to every writer rank.
  void run(ChunkQueue& queue) {
    forward_queue(queue);
    if (!queue.failure().empty()) return;  // the streamer is failing: the job ends
    while (in_flight())
      if (!reap()) pause();
    say_done();
    queue.set_result({});  // nothing written here: the writer ranks count it
  }

 private:
  MPI_Comm comm_;
  const ChunkRoute& route_;
  ChunkQueue& queue_;
  const storage::VisibilityLayout& layout_;
  TransitTally& tally_;
  Writers* own_;  // the exchange: this rank's own writers
  int rank_ = -1;
  MessageSlots slots_;  // kept by a failing streamer while in flight
  std::vector<int> done_;
  Backoff backoff_;

  // Waiting on the writer group; a failing queue ends the wait (a rank
  // whose receiver failed never matches the sends to it).
  void pause() {
    if (const auto failure = queue_.failure(); !failure.empty())
      throw std::runtime_error(failure);
    backoff_.pause(tally_.send_wait_s);
  }

  bool in_flight() const { return iotest::in_flight(slots_.requests); }
  // Completed sends: their slots free (MPI_Testsome sets them to
  // MPI_REQUEST_NULL). True if any completed.
  bool reap() {
    int count = 0;
    MPI_Testsome(slots_.size(), slots_.requests.data(), &count, done_.data(),
                 MPI_STATUSES_IGNORE);
    return count > 0 && count != MPI_UNDEFINED;
  }

  // The queue's entries, one by one; while sends are in flight and no
  // entry comes, they are reaped every kPollMs.
  void forward_queue(ChunkQueue& queue) {
    ChunkQueue::Entry e;
    for (;;) {
      const auto got = queue.peek(e, in_flight() ? kPollMs : -1);
      if (got == ChunkQueue::Peek::closed) break;
      if (got == ChunkQueue::Peek::timeout) {
        reap();
        continue;
      }
      forward(e);
      queue.release();
    }
  }

  void forward(const ChunkQueue::Entry& e) {
    if (e.key.row_chunk == kWrittenPartsEntry) {  // every writer rank records them
      for (const int to : route_.ranks)
        send(to, {TransitHeader::written_parts, 0, 0, e.visibilities}, e.data, e.visibilities,
             nullptr, 0);
      return;
    }
    const int to = route_.rank_of(e.key);
    if (own_ && to == rank_) {  // its queue's wait is the forwarder's, as a send's would be
      own_->write(e.key, e.data, e.visibilities, e.present);
      ++tally_.kept_chunks;
      return;
    }
    const index_t presence_bytes =
        layout_.presence_words() * static_cast<index_t>(sizeof(storage::PresenceWord));
    send(to,
         {e.present ? TransitHeader::chunk_part : TransitHeader::whole_chunk, e.key.row_chunk,
          e.key.freq_chunk, e.visibilities},
         e.data, layout_.chunk_bytes(), e.present, presence_bytes);
  }

  // A free slot, waiting (the writer group's back-pressure) if every one
  // is in flight.
  size_t free_slot() {
    for (;;) {
      for (size_t i = 0; i < slots_.requests.size(); ++i)
        if (slots_.requests[i] == MPI_REQUEST_NULL) return i;
      if (reap())
        backoff_.reset();
      else
        pause();
    }
  }

  // One message: the header, then the values and (a part of a chunk) its
  // presence bits, copied into a free slot and sent from there.
  void send(int to, const TransitHeader& h, const void* values, index_t value_bytes,
            const void* bits, index_t bit_bytes) {
    const size_t i = free_slot();
    char* at = slots_.buffers[i].data();
    std::memcpy(at, &h, sizeof h);
    std::memcpy(at + sizeof h, values, static_cast<size_t>(value_bytes));
    if (bits) std::memcpy(at + sizeof h + value_bytes, bits, static_cast<size_t>(bit_bytes));
    const index_t payload = value_bytes + (bits ? bit_bytes : 0);
    MPI_Issend(at, static_cast<int>(sizeof h + payload), MPI_BYTE, to, kTagChunk, comm_,
               &slots_.requests[i]);
    ++tally_.chunks;
    tally_.bytes += payload;
  }

  // This streamer is done: an empty message to each writer rank.
  void say_done() {
    for (const int to : route_.ranks) {
      MPI_Request request;
      MPI_Issend(nullptr, 0, MPI_BYTE, to, kTagChunk, comm_, &request);
      for (;;) {
        int done = 0;
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done) break;
        pause();
      }
    }
  }
};

}  // namespace

index_t transit_message_bytes(const storage::VisibilityLayout& layout) {
  return static_cast<index_t>(sizeof(TransitHeader)) + layout.chunk_bytes() +
         layout.presence_words() * static_cast<index_t>(sizeof(storage::PresenceWord));
}

std::function<void(ChunkQueue&)> forward_to_writer_group(MPI_Comm comm, ChunkRoute route,
                                                         index_t slots,
                                                         const storage::VisibilityLayout& layout,
                                                         TransitTally& tally, Writers* own) {
  return [comm, route, slots, layout, &tally, own](ChunkQueue& queue) {
    queue.mark_opened();  // nothing to open here: the writer ranks hold the outputs
    try {
      Forwarder(comm, route, slots, layout, tally, queue, own).run(queue);
    } catch (const std::exception& e) {
      queue.fail(std::string("forwarding to the writer group: ") + e.what());
    }
  };
}

TransitReceived receive_from_streamers(MPI_Comm comm, int senders, index_t slots,
                                       const storage::VisibilityLayout& layout, Writers& writers,
                                       TimeSeries& timeline) {
  TransitReceived got;
  // Waiting for messages is idle; waiting on its writers' queues, wait.
  const auto totals = [&]() -> StageTotals {
    return {writers.wait_s(), got.idle_s, 0, 0, writers.taken_bytes()};
  };
  const index_t bytes = transit_message_bytes(layout);
  // Posted receives outlive a failure here (its writers' failing push
  // throws): their buffers are then kept.
  MessageSlots slots_in(slots, bytes);
  auto& buffers = slots_in.buffers;
  auto& requests = slots_in.requests;
  const int n = slots_in.size();
  std::vector<int> done(static_cast<size_t>(slots));
  std::vector<MPI_Status> statuses(static_cast<size_t>(slots));
  const auto post = [&](size_t i) {
    MPI_Irecv(buffers[i].data(), static_cast<int>(bytes), MPI_BYTE, MPI_ANY_SOURCE, kTagChunk, comm,
              &requests[i]);
  };
  std::vector<storage::WrittenPart> parts;
  int ended = 0;
  // One message in: its chunk to the writers (parts of chunks add up in
  // any order), its written parts kept, or a streamer's end counted.
  const auto take = [&](size_t i, const MPI_Status& status) {
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (count == 0) {
      ++ended;
      return;
    }
    TransitHeader h;
    std::memcpy(&h, buffers[i].data(), sizeof h);
    const char* payload = buffers[i].data() + sizeof h;
    if (h.kind == TransitHeader::written_parts) {
      const auto* records = reinterpret_cast<const storage::WrittenPart*>(payload);
      parts.insert(parts.end(), records,
                   records + h.visibilities / static_cast<index_t>(sizeof(storage::WrittenPart)));
    } else {
      const auto* present =
          h.kind == TransitHeader::chunk_part
              ? reinterpret_cast<const storage::PresenceWord*>(payload + layout.chunk_bytes())
              : nullptr;
      writers.write({h.row_chunk, h.freq_chunk}, reinterpret_cast<const cplx*>(payload),
                    h.visibilities, present);
      ++got.chunks;
    }
    got.bytes += count - static_cast<index_t>(sizeof h);
  };
  for (size_t i = 0; i < buffers.size(); ++i) post(i);
  Backoff backoff;
  while (ended < senders) {
    int count = 0;
    MPI_Testsome(n, requests.data(), &count, done.data(), statuses.data());
    if (count > 0) {
      backoff.reset();
      for (int c = 0; c < count; ++c) {
        const auto i = static_cast<size_t>(done[static_cast<size_t>(c)]);
        take(i, statuses[static_cast<size_t>(c)]);
        if (ended < senders) post(i);
      }
    } else {
      backoff.pause(got.idle_s);
    }
    timeline.sample(totals);
  }
  // Every streamer's last (empty) message is in, so each message has been
  // matched; one matched but not yet complete cannot be cancelled and is
  // taken, the receives left unmatched are cancelled.
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&requests[i]);
    MPI_Status status;
    MPI_Wait(&requests[i], &status);
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    if (!cancelled) take(i, status);
  }
  if (!parts.empty()) writers.record_written(storage::merge_written_parts(std::move(parts)));
  return got;
}

}  // namespace iotest::pipeline
