// The producer (facet worker): holds its facets, walks the visits in order
// and sends each facet's contribution to the streamers of each visit, with
// at most --send-queue x --producer-threads sends in flight.
#include <algorithm>
#include <optional>
#include <stdexcept>

#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/pipeline/image_receiver.hpp"
#include "iotest/pipeline/roles.hpp"

namespace iotest::pipeline {
namespace {

// One send buffer and its requests (one per streamer of the visit). Each
// send's time in flight, from its MPI_Isend to the test that sees it
// complete, is added to its destination's (issue 37, item 4: which host's
// link bounds a run). The producer tests every busy slot whenever it looks
// for a free one, so a completion is seen within one pass of its loop.
// Kept by a failing rank while in flight.
struct SendSlot {
  Array2D buffer;
  std::vector<MPI_Request> requests;
  std::vector<int> destinations;
  Clock::time_point posted;
  std::vector<PeerSends>* sent_to = nullptr;
  SendSlot() = default;
  SendSlot(SendSlot&&) = default;
  SendSlot& operator=(SendSlot&&) = default;
  ~SendSlot() { keep_while_in_flight(requests, buffer); }
  void post(int destination, index_t bytes, MPI_Comm comm, int tag, index_t values) {
    if (requests.empty()) posted = Clock::now();
    MPI_Request request;
    MPI_Isend(buffer.data(), static_cast<int>(values), MPI_C_DOUBLE_COMPLEX, destination, tag,
              comm, &request);
    requests.push_back(request);
    destinations.push_back(destination);
    auto& peer = (*sent_to)[static_cast<size_t>(destination)];
    peer.messages += 1;
    peer.bytes += static_cast<double>(bytes);
  }
  bool busy() {
    if (requests.empty()) return false;
    bool pending = false;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);  // sets it to MPI_REQUEST_NULL once done
      if (done)
        (*sent_to)[static_cast<size_t>(destinations[i])].in_flight_s += seconds_since(posted);
      else
        pending = true;
    }
    if (!pending) {
      requests.clear();
      destinations.clear();
    }
    return pending;
  }
};

}  // namespace

StopAgreement::StopAgreement(const Context& ctx) : ctx_(ctx) {}

void StopAgreement::join(index_t next) {
  joined_ = true;
  offer_ = next;
  MPI_Iallreduce(&offer_, &cut_, 1, MPI_INT64_T, MPI_MAX, ctx_.producers, &request_);
}

void StopAgreement::test() {
  int done = 0;
  MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
  known_ = done != 0;
}

index_t StopAgreement::poll(index_t next) {
  if (!ctx_.deadline || ctx_.producers == MPI_COMM_NULL) return -1;
  if (!joined_ && ctx_.past_deadline()) join(next);
  if (joined_ && !known_) test();
  return known_ ? cut_ : -1;
}

bool StopAgreement::may_start(index_t next, double& waited) {
  poll(next);
  if (!joined_) return true;
  Backoff backoff;
  while (!known_ && next >= offer_) {
    backoff.pause(waited);
    test();
  }
  return !known_ || next < cut_;
}

index_t StopAgreement::finish(index_t visits, double& waited) {
  if (!ctx_.deadline || ctx_.producers == MPI_COMM_NULL) return -1;
  if (!joined_) join(visits);
  Backoff backoff;
  for (test(); !known_; test()) backoff.pause(waited);
  return cut_;
}

namespace {

// One producer's run: its facets (prepared per w-stack, then per subgrid
// column), the send slots, and the tallies. Each visit: wait for its
// streamers, prepare what the visit's w-stack and column need, then the
// facets' contributions in batches as send slots come free. Members, not
// a closure's captures, so that each step is a function of its own.
struct Producer {
  Context& ctx;
  RankResult out;
  report::RankStats& st = out.stats;
  const config::RecombinationParams& p = ctx.job.p;
  const swiftly::Recombination& rec = *ctx.rec;
  const int threads = ctx.producer_threads;
  const std::vector<index_t> facets = ctx.facets_of_producer();  // round-robin
  std::vector<Array2D>& prepared = ctx.prepared_facets;          // allocated in setup
  const bool compute = !ctx.options.network_only;  // --network-only: send the buffers as they are
  const bool dynamic = ctx.roles.assigner_rank >= 0;
  const index_t contribution_values = p.m * p.m;
  std::vector<Array2D> columns;                     // per facet: the current subgrid column
  std::vector<swiftly::ColumnWorkspace> column_ws;  // per thread
  std::vector<Array2D> facet_ws;                    // per thread
  std::vector<SendSlot> slots;
  Assignments assignments{ctx};
  // --direction=both: the residual's contributions come back while the
  // model's go out; the imaging side is polled wherever this one waits.
  std::optional<ImageReceiver> receiver;
  // Emplaced last in the constructor: its clock starts once the buffers
  // are made.
  std::optional<Progress> progress;
  ExceptionCollector failures;
  Backoff backoff;
  double waited = 0;
  StopAgreement stop{ctx};          // --duration, static assignment
  std::vector<int> streamers;       // the current visit's parts'
  index_t stack = kNoStack, column = -1;  // the w-stack and subgrid column prepared

  explicit Producer(Context& c);
  RankResult run();
  bool meanwhile() { return receiver && receiver->step(st); }
  StageTotals totals() const { return {waited, 0, 0, st.bytes_sent, 0}; }
  bool visit(size_t k);
  void prepare_facets(index_t new_stack);
  void prepare_column(index_t i0, index_t subgrid);
  void send_contributions(size_t k, const Visit& v);
  std::vector<SendSlot*> free_slots(size_t k, size_t wanted);
  void extract_contributions(const Visit& v, size_t next, const std::vector<SendSlot*>& free);
  void post_contributions(size_t next, const std::vector<SendSlot*>& free);
  void end_walk();
  void finish();
};

Producer::Producer(Context& c) : ctx(c) {
  for (size_t i = 0; compute && i < facets.size(); ++i) columns.push_back(rec.make_column());
  for (int t = 0; t < threads && compute; ++t) {
    column_ws.emplace_back(p);
    facet_ws.push_back(rec.make_facet());
  }
  slots.resize(static_cast<size_t>(ctx.options.send_queue * threads));
  int data_size = 0;
  MPI_Comm_size(ctx.data, &data_size);
  out.sent_to.assign(static_cast<size_t>(data_size), {});
  for (auto& s : slots) {
    s.buffer = rec.make_contribution();
    s.sent_to = &out.sent_to;
  }
  if (ctx.both())
    receiver.emplace(ctx, ctx.facet_sums, ctx.options.send_queue * threads, assignments);
  progress.emplace(ctx.options.progress && ctx.roles.rank == 0,
                   static_cast<index_t>(ctx.plan.visits.size()), "subgrids");
}

RankResult Producer::run() {
  const auto t_start = Clock::now();
  for (size_t k = 0; k < ctx.plan.visits.size(); ++k)
    if (!visit(k)) break;
  end_walk();
  finish();
  progress->finish();
  const double total = seconds_since(t_start);
  st.wait_s = waited;
  st.busy_s = total - waited;
  ctx.timeline.finish(totals());
  return out;
}

// Visit k: false when the walk ends before it (--duration, or the
// assigner said so).
bool Producer::visit(size_t k) {
  const auto& v = ctx.plan.visits[k];
  if (!dynamic && !stop.may_start(static_cast<index_t>(k), waited)) return false;
  if (!assignments.streamers_of(static_cast<index_t>(k), v, streamers, waited,
                                [this] { return meanwhile(); }))
    return false;
  if (v.stack != stack && !compute)
    stack = v.stack;
  else if (v.stack != stack)
    prepare_facets(v.stack);
  const index_t i0 = v.subgrid / p.subgrids_per_axis;
  if (i0 != column && compute) prepare_column(i0, v.subgrid);
  send_contributions(k, v);
  progress->update(static_cast<index_t>(k + 1));
  ctx.timeline.sample([this] { return totals(); });
  meanwhile();
  return true;
}

// A new w-stacking plane: the facets prepared for it.
void Producer::prepare_facets(index_t new_stack) {
  // The streamers wait for the first stack's facets with nothing else
  // to do, so the host's idle cores join each facet's transforms.
  const int inner = stack == kNoStack ? std::max(1, ctx.setup_threads / threads) : 1;
  stack = new_stack;
  column = -1;
  const auto t_facets = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (size_t i = 0; i < facets.size(); ++i)
    failures.capture([&] {
      auto facet = facet_ws[static_cast<size_t>(omp_get_thread_num())].view();
      const index_t f = facets[i];
      sky::fill_facet(ctx.job.sources, ctx.facet_tile0(f), ctx.facet_tile1(f), facet);
      if (ctx.degridder)
        ctx.degridder->correct_facet(ctx.facet_tile0(f), ctx.facet_tile1(f), stack, facet);
      rec.prepare_facet(facet, prepared[i].view(), inner);
    });
  failures.rethrow();
  st.stages.facet_s += seconds_since(t_facets) * threads;
}

// A new subgrid column (i0, that of `subgrid`): each facet's column.
void Producer::prepare_column(index_t i0, index_t subgrid) {
  column = i0;
  const auto t_column = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (size_t i = 0; i < facets.size(); ++i)
    failures.capture([&] {
      rec.prepare_column(prepared[i].view(), ctx.facet_tile0(facets[i]).offset,
                         ctx.subgrid_tile0(subgrid).offset,
                         column_ws[static_cast<size_t>(omp_get_thread_num())], columns[i].view());
    });
  failures.rethrow();
  st.stages.column_s += seconds_since(t_column) * threads;
}

// Visit k's contributions, in batches as send slots come free.
void Producer::send_contributions(size_t k, const Visit& v) {
  for (size_t next = 0; next < facets.size();) {
    const std::vector<SendSlot*> free = free_slots(k, facets.size() - next);
    extract_contributions(v, next, free);
    post_contributions(next, free);
    st.send_queue_max = std::max<index_t>(
        st.send_queue_max, std::count_if(slots.begin(), slots.end(),
                                         [](const SendSlot& s) { return !s.requests.empty(); }));
    next += free.size();
  }
}

// Up to `wanted` free send slots, waiting (polling the stop agreement and
// the imaging side) until at least one is.
std::vector<SendSlot*> Producer::free_slots(size_t k, size_t wanted) {
  std::vector<SendSlot*> free;
  while (true) {
    for (auto& s : slots)  // every slot tested, for the sends' times in flight
      if (!s.busy() && free.size() < wanted) free.push_back(&s);
    if (!free.empty()) break;
    if (!dynamic) stop.poll(static_cast<index_t>(k) + 1);  // this visit is under way
    if (!meanwhile()) backoff.pause(waited);
    ctx.timeline.sample([this] { return totals(); });
  }
  backoff.reset();
  return free;
}

// The contributions of facets next, next + 1, ... into the free slots'
// buffers (--network-only: the buffers are sent as they are).
void Producer::extract_contributions(const Visit& v, size_t next,
                                     const std::vector<SendSlot*>& free) {
  const size_t batch = free.size();
  const auto t_contributions = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (size_t b = 0; b < batch; ++b)
    failures.capture([&] {
      if (!compute) return;
      rec.extract_contribution(columns[next + b].view(), ctx.facet_tile1(facets[next + b]).offset,
                               ctx.subgrid_tile1(v.subgrid).offset, free[b]->buffer.view());
    });
  failures.rethrow();
  if (compute) st.stages.contribution_s += seconds_since(t_contributions) * threads;
}

// Each contribution to every streamer of the visit, tagged by its facet.
void Producer::post_contributions(size_t next, const std::vector<SendSlot*>& free) {
  const index_t bytes = contribution_values * static_cast<index_t>(sizeof(cplx));
  for (size_t b = 0; b < free.size(); ++b) {
    for (const int s : streamers) {
      free[b]->post(ctx.roles.streamer_rank(s), bytes, ctx.data, static_cast<int>(facets[next + b]),
                    contribution_values);
      ++st.messages_sent;
      st.bytes_sent += bytes;
    }
    ++st.contributions;
  }
}

// --duration: the streamers learn where the walk ended (static
// assignment; the assigner tells them itself).
void Producer::end_walk() {
  const auto visits = static_cast<index_t>(ctx.plan.visits.size());
  if (!dynamic && ctx.deadline) {
    const std::int64_t cut = stop.finish(visits, waited);
    out.walk_end = cut < static_cast<std::int64_t>(visits) ? cut : -1;
    if (ctx.roles.rank == 0)
      for (int s = 0; s < ctx.roles.streamers; ++s)
        MPI_Send(&cut, 1, MPI_INT64_T, ctx.roles.streamer_rank(s), kTagEnd, ctx.control);
  } else if (dynamic && assignments.end() >= 0 && assignments.end() < visits) {
    out.walk_end = assignments.end();
  }
}

// The last sends, and (--direction=both) the residual's last contributions.
void Producer::finish() {
  for (auto& s : slots)
    while (s.busy())
      if (!meanwhile()) backoff.pause(waited);
  if (receiver) {
    while (!receiver->done())
      if (!receiver->step(st)) backoff.pause(waited);
    receiver->finish();
  }
}

}  // namespace

RankResult run_producer(Context& ctx) { return Producer(ctx).run(); }

}  // namespace iotest::pipeline
