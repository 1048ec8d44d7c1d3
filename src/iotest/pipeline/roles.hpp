// Inside the pipeline: what every rank knows (the Context), the message
// protocol, and one function per role. See docs/pipeline.md.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "iotest/chunks/chunk_gatherer.hpp"
#include "iotest/common/accuracy.hpp"
#include "iotest/common/mpi_agree.hpp"
#include "iotest/common/mpi_wait.hpp"
#include "iotest/common/system.hpp"
#include "iotest/job/job.hpp"
#include "iotest/pipeline/gpu_lane.hpp"
#include "iotest/pipeline/run_options.hpp"
#include "iotest/pipeline/transit.hpp"
#include "iotest/pipeline/work.hpp"
#include "iotest/pipeline/writers.hpp"
#include "iotest/report/report.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/storage/output/file_claim.hpp"
#include "iotest/storage/output/unpublished.hpp"
#include "iotest/storage/reader.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/swiftly/core.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::pipeline {

// ---- protocol -------------------------------------------------------------
// Contributions (producer -> streamer) are m x m complex doubles on the data
// communicator with the facet index as tag (below 9216 for every published
// set, well under MPI's guaranteed 32767). Between one producer and one
// streamer, MPI's ordering matches them to receives posted in walk order.
// Control messages use their own communicator:
inline constexpr int kTagRequest = 1;  // streamer -> assigner: int64 free subgrid slots
inline constexpr int kTagGrant = 2;    // assigner -> streamer: int64 part indices; none: finished
inline constexpr int kTagAssign = 3;   // assigner -> producers: int64 pairs (part, streamer);
                                       // the pair (-1, K): the walk ends before visit K
inline constexpr int kTagEnd = 4;      // producer 0 -> streamers (--duration, static
                                       // assignment): int64 K, the walk ends before visit K
inline constexpr int kTagImage = 5;    // producers -> rank 0 (--image, after the walk): a
                                       // block of rows of a facet's region, complex doubles

// In situ with outputs split by frequency (ms) and several streamers: each
// streamer's writers forward every chunk to the streamer holding its file
// (the in-transit protocol, with the streamers as the writer group), and a
// receiving thread hands what comes to its own writers (rank_writers.cpp).
// A chunk for the streamer's own files skips MPI: the forwarding thread
// hands it to those writers itself. A chunk's parts from several
// streamers meet in one file.
struct ChunkExchange {
  // What the receiving thread shares, held by it too: a failing streamer
  // destroys its Context (and this) while the thread may still run.
  struct Shared {
    std::mutex lock;
    TransitReceived received;  // by the receiver, read once it is joined
    std::string failure;       // the receiver's, if it failed
    // The streamer's forwarding writers, failed with the receiver (so the
    // streamer's next push throws); let go before they are destroyed.
    Writers* forwarding = nullptr;
    // The forwarding writers once they exist: failed now if the receiver
    // already has.
    void attach(Writers* w);
    void fail(const std::string& message);
  };
  std::unique_ptr<Writers> writers;  // this streamer's outputs
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  std::thread receiver;
  ~ChunkExchange() {
    // Destroyed before the Context's forwarding writers (it is declared
    // after them): the receiver must not fail them from now on.
    {
      const std::lock_guard<std::mutex> hold(shared->lock);
      shared->forwarding = nullptr;
    }
    // Joined by finish_exchange, after the forwarding thread has finished.
    // Still running only when the streamer is failing and the job is being
    // aborted: the receiver, and the forwarding thread (until the Context's
    // writers stop it), may still be in the writers, so they are left to
    // the process's end.
    if (!receiver.joinable()) return;
    receiver.detach();
    (void)writers.release();
  }
};

// ---- what every rank knows --------------------------------------------------
struct Roles {
  int rank = 0, size = 1;
  int producers = 0, streamers = 0;
  int writers = 0;         // the writer group (in transit), after the streamers
  int assigner_rank = -1;  // -1: static assignment
  bool is_producer() const { return rank < producers; }
  bool is_assigner() const { return rank == assigner_rank; }
  bool is_writer() const {
    return rank >= producers + streamers && rank < producers + streamers + writers;
  }
  bool is_streamer() const { return !is_producer() && !is_assigner() && !is_writer(); }
  // Holds outputs: the writer ranks in transit, else the streamers.
  bool writes_outputs() const { return writers > 0 ? is_writer() : is_streamer(); }
  int streamer_index() const { return rank - producers; }
  int streamer_rank(int index) const { return producers + index; }
  int writer_index() const { return rank - producers - streamers; }
  int writer_rank(int index) const { return producers + streamers + index; }
  int facet_owner(index_t facet) const { return static_cast<int>(facet % producers); }
};

struct Context {
  RunOptions options;
  Roles roles;
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  MPI_Comm producers = MPI_COMM_NULL;  // the producers among themselves (others: null)
  // The streamers among themselves when they share one output (phdf5;
  // otherwise and elsewhere: null).
  MPI_Comm shared_output = MPI_COMM_NULL;
  // In transit: the streamers' chunks to the writer ranks (its own
  // communicator, so their receives from any source take nothing else);
  // a streamer's forwarding thread's tally.
  MPI_Comm transit = MPI_COMM_NULL;
  TransitTally transit_tally;
  // This rank's figures over the run (--timeline), started with the run.
  TimeSeries timeline;
  job::Job job;                    // resolved once: rec-set, observation, geometry, w layout, sky
  storage::StorageChoice storage;  // the output's back-end, resolved once (check_run_options)
  // --device=cuda: the GPUs a streamer sees on its node (job::require_device;
  // elsewhere and on the CPU: none).
  std::vector<device::GpuInfo> gpus;
  std::unique_ptr<swiftly::Recombination> rec;
  std::unique_ptr<binning::Binner> binner;       // with a vis-set
  std::unique_ptr<degrid::Degridder> degridder;  // with a vis-set
  // --device=cuda: a streamer's GPU (one of its node's, round-robin by its
  // index among the node's streamers), which its threads share.
  std::unique_ptr<GpuLane> gpu;
  int gpu_ordinal = 0;
  std::vector<swiftly::Tile> facet_tiles, subgrid_tiles;
  WorkPlan plan;
  int threads = 1, producer_threads = 1;
  // A producer's threads while the streamers only wait for it: the first
  // touch of its prepared facets and their first preparation (run.cpp's
  // first_touch_threads).
  int setup_threads = 1;
  std::uint32_t nonce = 0;  // this run's (storage::Provenance::nonce), rank 0's
  std::string started;      // when the run started (UTC, ISO 8601), rank 0's
  // Pools a streamer allocates (and touches) up front, from the memory
  // model: planes per w-tower and visibilities per degrid task.
  index_t tower_planes = 0, task_visibilities = 0;
  double start_s = 0;  // MPI_Wtime at the start barrier
  // --duration: no new work after this (stonewalling); nothing: never.
  std::optional<Clock::time_point> deadline;
  bool past_deadline() const { return deadline && Clock::now() >= *deadline; }
  // A producer's prepared facets (those of facets_of_producer), allocated
  // and first touched while a streamer plans the FFTs.
  std::vector<Array2D> prepared_facets;
  // The imaging direction: a producer's dirty image facets (those of
  // facets_of_producer), a
  // streamer's input files (none: it predicts the visibilities itself),
  // and the dirty image pixels checked against the direct adjoint transform.
  std::vector<Array2D> image_facets;
  // A w-stack's facet sums of the imaging side (the prepared facets'
  // twins; with --direction=image they replace them).
  std::vector<Array2D> facet_sums;
  std::vector<std::unique_ptr<storage::Reader>> inputs;
  std::vector<sky::PointSource> pixels;
  std::uint32_t input_nonce = 0;  // the input files' run (their synthetic pattern)
  bool imaging() const { return options.direction != swiftly::Direction::predict; }
  bool both() const { return options.direction == swiftly::Direction::both; }

  // This rank's outputs, one per writer, numbered across the streamers, or
  // in transit across the writer ranks (empty names in a dry run; none on
  // other roles).
  std::vector<std::string> outputs() const;
  // The outputs this rank publishes (a shared one by its first writing
  // rank), claimed before the work (storage/output/output_claim.hpp).
  // Before the writers: they go after them, when their partial outputs are
  // let go.
  std::vector<std::unique_ptr<storage::OutputClaim>> claims;
  // The run's outputs, every rank's, taken back should this rank end the
  // job early (an object store's uploads; storage/output/unpublished.hpp).
  std::optional<storage::UnpublishedOutput> unpublished_outputs;
  // --image: the dirty image's claim, held by rank 0, its writer.
  std::optional<storage::FileClaim> image_claim;
  // Where each of outputs()'s writers writes until it is published: its
  // claim's partial(), or, a shared output another rank claimed, its
  // store's name for it (OutputStore::partial_of); empty names where
  // nothing is kept.
  std::vector<std::string> partial_outputs() const;
  // --file-layout: why it could not be set on an output (empty: set, or
  // not asked); this rank's first reason, then the run's (agree_layout).
  std::string file_layout_not_set;
  // A streamer's writers and the layout they write (with visibilities),
  // opened before the start barrier (open_writers). In transit, and in situ
  // when chunks are exchanged, they forward the chunks; exchanged, those
  // for this streamer's own files go straight to the exchange's writers
  // (which outlive the forwarding thread: ~ChunkExchange).
  std::unique_ptr<Writers> writers;
  storage::VisibilityLayout layout;
  std::unique_ptr<ChunkExchange> exchange;
  // How the outputs divide the observation (by frequency for ms); the
  // run's index of this rank's first output; whether, in situ, streamers
  // exchange chunks (split by frequency, several streamers).
  storage::FileSplit split() const;
  index_t first_output() const;
  bool exchanges_chunks() const;

  // This rank's facets as a producer: every producers-th from its rank.
  std::vector<index_t> facets_of_producer() const {
    std::vector<index_t> facets;
    for (index_t f = roles.rank; roles.is_producer() && f < job.p.facet_count();
         f += roles.producers)
      facets.push_back(f);
    return facets;
  }

  const swiftly::Tile& facet_tile0(index_t f) const {
    return facet_tiles[static_cast<size_t>(f / job.p.facets_per_axis)];
  }
  const swiftly::Tile& facet_tile1(index_t f) const {
    return facet_tiles[static_cast<size_t>(f % job.p.facets_per_axis)];
  }
  const swiftly::Tile& subgrid_tile0(index_t s) const {
    return subgrid_tiles[static_cast<size_t>(s / job.p.subgrids_per_axis)];
  }
  const swiftly::Tile& subgrid_tile1(index_t s) const {
    return subgrid_tiles[static_cast<size_t>(s % job.p.subgrids_per_axis)];
  }
};

// The parts' streamers as the assigner hands them out.
class Assignments {
 public:
  Assignments(const Context& ctx) : ctx_(ctx), streamer_(ctx.plan.parts.size(), -1) {
    for (size_t i = 0; i < streamer_.size(); ++i) streamer_[i] = ctx.plan.parts[i].streamer;
  }
  // The streamer of every part of visit k, waiting for the assigner if
  // needed; false when the assigner ended the walk before visit k.
  // `meanwhile` (if any) runs while it waits, instead of sleeping when it
  // returns true: --direction=both's imaging side.
  bool streamers_of(index_t k, const Visit& v, std::vector<int>& out, double& waited,
                    const std::function<bool()>& meanwhile = {}) {
    out.clear();
    if (ctx_.roles.streamers == 0) return true;  // a producer-only dry run
    Backoff backoff;
    while (true) {
      if (end_ >= 0 && k >= end_) return false;
      bool known = true;
      for (index_t i = 0; i < v.parts && known; ++i)
        known = streamer_[static_cast<size_t>(v.first_part + i)] >= 0;
      if (known) break;
      if (!receive() && !(meanwhile && meanwhile())) backoff.pause(waited);
    }
    for (index_t i = 0; i < v.parts; ++i)
      out.push_back(streamer_[static_cast<size_t>(v.first_part + i)]);
    return true;
  }
  // Whether the streamers of visit k's parts are known, after taking in
  // what the assigner has sent (never waits).
  bool known(const Visit& v) {
    while (receive()) {
    }
    for (index_t i = 0; i < v.parts; ++i)
      if (streamer_[static_cast<size_t>(v.first_part + i)] < 0) return false;
    return true;
  }
  index_t end() const { return end_; }

 private:
  bool receive() {
    // Static assignment: nothing comes. (Its rank, -1, is not a rank to
    // probe: Open MPI reads it as MPI_ANY_SOURCE, MPICH as MPI_PROC_NULL,
    // which "has" an empty message every time, and the caller spun.)
    if (ctx_.roles.assigner_rank < 0) return false;
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(ctx_.roles.assigner_rank, kTagAssign, ctx_.control, &flag, &status);
    if (!flag) return false;
    int count = 0;
    MPI_Get_count(&status, MPI_INT64_T, &count);
    std::vector<std::int64_t> pairs(static_cast<size_t>(count));
    MPI_Recv(pairs.data(), count, MPI_INT64_T, status.MPI_SOURCE, kTagAssign, ctx_.control,
             MPI_STATUS_IGNORE);
    for (size_t i = 0; i + 1 < pairs.size(); i += 2)
      if (pairs[i] < 0)
        end_ = pairs[i + 1];
      else
        streamer_[static_cast<size_t>(pairs[i])] = static_cast<int>(pairs[i + 1]);
    return true;
  }
  const Context& ctx_;
  std::vector<int> streamer_;
  index_t end_ = -1;  // the assigner's end of the walk (--duration)
};

// --duration with static assignment: the producers agree on the visit the
// walk ends before. Each joins one non-blocking MAX-allreduce once past the
// deadline (offering the first visit it has not started) or at the end of
// its walk (offering them all), and starts no visit at or past its offer
// until the cut is known, so every producer reaches the cut and no
// streamer waits for a contribution that will not come.
class StopAgreement {
 public:
  StopAgreement(const Context& ctx);
  // Polled wherever the producer waits, and before each visit; `next` is
  // the first visit it has not started. Returns the cut once known (-1:
  // not yet, or no --duration).
  index_t poll(index_t next);
  // Before starting visit `next`: waits for the cut if this producer has
  // offered to stop there; false when the walk ends before `next`.
  bool may_start(index_t next, double& waited);
  // At the end of the walk: joins if it has not, and waits for the cut.
  index_t finish(index_t visits, double& waited);

 private:
  const Context& ctx_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::int64_t offer_ = -1, cut_ = -1;
  bool joined_ = false, known_ = false;
  void join(index_t next);
  void test();
};

// The contributions a producer sent to one rank, and the seconds they
// spent in flight (report::PeerTraffic).
struct PeerSends {
  double messages = 0, bytes = 0, in_flight_s = 0;
};

// A rank's figures beyond report::RankFigures, named once: plain numbers
// (trivially copyable), so that every rank sends them to rank 0 as bytes
// at the end (run_report.cpp) and rank 0 adds them up with add().
struct RoleFigures {
  RelativeError subgrid_error, vis_error;
  double subgrid_error_worst = -1;  // the worst subgrid's figure (-1: none)
  index_t subgrids_checked = 0, vis_checked = 0;
  index_t visibilities_written = 0;
  index_t parts_done = 0, tasks_skipped = 0;  // --duration: parts whose every task ran
  index_t walk_end = -1;                      // the visit the walk ended before (-1: all)
  chunks::ReadTally read;                     // the imaging direction: what was read
  index_t values_checked = 0, values_wrong = 0;  // storage only: against the pattern
  double input_s = 0, check_s = 0;               // predicting visibilities in memory; checks
  // --direction=both: the model's degridding, and the sums of |V|^2 of the
  // observed and residual visibilities.
  double degrid_s = 0, observed2 = 0, residual2 = 0;
  double grid_s = 0;  // the busiest gridding thread's time in gridding, collapsing, extracting
  // Waits on writing: a streamer's degridding threads on its full chunk
  // queue (in situ or in transit), a writer rank's receiving on its
  // writers'. In transit: chunks and payload bytes sent (streamers) or
  // received (writer ranks), a forwarder's waits for the writer group, a
  // writer rank's waits for the streamers. The in situ exchange: chunks a
  // streamer kept, for its own files (not sent).
  double queue_wait_s = 0;
  index_t transit_chunks = 0, transit_bytes = 0, transit_kept_chunks = 0;
  double send_wait_s = 0, transit_idle_s = 0;
  // --device=cuda: a streamer's GPU time, kernels, copies and the host's
  // waits apart (GpuDegridder's CUDA events).
  device::GpuTiming gpu;

  // Another rank's figures into these (the whole run's): counts and sums
  // added, errors pooled, the worst and the busiest (times) kept.
  void add(const RoleFigures& other);
};

// What a role's work leaves on its rank.
struct RankResult : RoleFigures {
  report::RankStats stats;
  std::vector<PeerSends> sent_to;  // producers: per destination rank of the data communicator
  // The imaging direction: the sampled pixels' direct sums (streamers) and
  // image values (producers), summed over the ranks.
  std::vector<cplx> dirty_sums, image_pixels;
};

// Shows progress on rank 0: on a terminal a line redrawn in place, in a
// log a line every 10 s.
class Progress {
 public:
  Progress(bool enabled, index_t total, const char* what);
  void update(index_t done);
  void finish();

 private:
  bool enabled_, tty_;
  index_t total_;
  const char* what_;
  double start_, last_ = -1e9;
};

RankResult run_producer(Context& ctx);
// Starts a streamer's writers: they open their outputs (UVH5 headers
// written and synced: 6.4 GB a file for SKA1-Low) during the setup, and
// the run waits for them (Writers::wait_opened) before the start, since
// opening is not streaming (IOR, too, keeps open apart from transfers).
// (rank_writers.cpp, as finish_writers and run_writer_rank)
void open_writers(Context& ctx);
// Returns once every output of this rank is open; throws the first failure.
void wait_writers_opened(Context& ctx);
// Closes this rank's writers (a streamer's, or a writer rank's) and takes
// their figures into `out`: what they wrote, the time spent waiting on
// their full queues (queue_wait_s).
void finish_writers(Context& ctx, RankResult& out);
RankResult run_streamer(Context& ctx);
// --synthetic-vis=sequential (file_order.cpp): the streamer's share of the
// chunks, whole, in file order, with no walk.
RankResult run_file_order_streamer(Context& ctx);
RankResult run_assigner(Context& ctx);
// In transit: receives the streamers' chunks and writes them.
RankResult run_writer_rank(Context& ctx);
// The imaging direction (image_producer.cpp, image_streamer.cpp).
RankResult run_image_producer(Context& ctx);
RankResult run_image_streamer(Context& ctx);
// --image, after the walk (image_producer.cpp; every producer): rank 0
// writes the dirty image into the claim's partial file facet by facet in
// the file's order, the other producers send it theirs a block of rows at
// a time (kTagImage), so it holds one block and its own facets, never the
// image. The figures on rank 0; the claim is published with the run's
// outputs.
report::ImageFile write_image(Context& ctx);

}  // namespace iotest::pipeline
