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
struct SendSlot {
  Array2D buffer;
  std::vector<MPI_Request> requests;
  std::vector<int> destinations;
  Clock::time_point posted;
  std::vector<PeerSends>* sent_to = nullptr;
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

RankResult run_producer(Context& ctx) {
  RankResult out;
  auto& st = out.stats;
  const auto& p = ctx.job.p;
  const auto& rec = *ctx.rec;
  const int threads = ctx.producer_threads;
  const std::vector<index_t> facets = ctx.facets_of_producer();  // round-robin
  std::vector<Array2D>& prepared = ctx.prepared_facets;          // allocated in setup
  const bool compute = !ctx.options.network_only;  // --network-only: send the buffers as they are
  std::vector<Array2D> columns;
  for (size_t i = 0; compute && i < facets.size(); ++i) columns.push_back(rec.make_column());
  std::vector<swiftly::ColumnWorkspace> column_ws;
  std::vector<Array2D> facet_ws;
  for (int t = 0; t < threads && compute; ++t) {
    column_ws.emplace_back(p);
    facet_ws.push_back(rec.make_facet());
  }
  std::vector<SendSlot> slots(static_cast<size_t>(ctx.options.send_queue * threads));
  int data_size = 0;
  MPI_Comm_size(ctx.data, &data_size);
  out.sent_to.assign(static_cast<size_t>(data_size), {});
  for (auto& s : slots) {
    s.buffer = rec.make_contribution();
    s.sent_to = &out.sent_to;
  }
  const index_t contribution_values = p.m * p.m;
  Assignments assignments(ctx);
  // --direction=both: the residual's contributions come back while the
  // model's go out; the imaging side is polled wherever this one waits.
  std::optional<ImageReceiver> receiver;
  if (ctx.both())
    receiver.emplace(ctx, ctx.facet_sums, ctx.options.send_queue * threads, assignments);
  const auto meanwhile = [&] { return receiver && receiver->step(st); };
  Progress progress(ctx.options.progress && ctx.roles.rank == 0,
                    static_cast<index_t>(ctx.plan.visits.size()), "subgrids");
  ExceptionCollector failures;
  Backoff backoff;
  double waited = 0;
  const auto t_start = Clock::now();
  const bool dynamic = ctx.roles.assigner_rank >= 0;
  StopAgreement stop(ctx);  // --duration, static assignment
  std::vector<int> streamers;
  const auto totals = [&]() -> StageTotals { return {waited, 0, 0, st.bytes_sent, 0}; };

  index_t stack = -1, column = -1;
  size_t k = 0;
  for (; k < ctx.plan.visits.size(); ++k) {
    const auto& v = ctx.plan.visits[k];
    if (!dynamic && !stop.may_start(static_cast<index_t>(k), waited)) break;
    if (!assignments.streamers_of(static_cast<index_t>(k), v, streamers, waited, meanwhile)) break;
    if (v.stack != stack && !compute) {
      stack = v.stack;
    } else if (v.stack != stack) {  // a new w-stacking plane: prepare the facets for it
      // The streamers wait for the first stack's facets with nothing else
      // to do, so the host's idle cores join each facet's transforms.
      const int inner = stack < 0 ? std::max(1, ctx.setup_threads / threads) : 1;
      stack = v.stack;
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
    const index_t i0 = v.subgrid / p.subgrids_per_axis;
    if (i0 != column && compute) {
      column = i0;
      const auto t_column = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (size_t i = 0; i < facets.size(); ++i)
        failures.capture([&] {
          rec.prepare_column(prepared[i].view(), ctx.facet_tile0(facets[i]).offset,
                             ctx.subgrid_tile0(v.subgrid).offset,
                             column_ws[static_cast<size_t>(omp_get_thread_num())],
                             columns[i].view());
        });
      failures.rethrow();
      st.stages.column_s += seconds_since(t_column) * threads;
    }
    // This visit's contributions, in batches as send slots come free.
    for (size_t next = 0; next < facets.size();) {
      std::vector<SendSlot*> free;
      while (true) {
        for (auto& s : slots)  // every slot tested, for the sends' times in flight
          if (!s.busy() && free.size() < facets.size() - next) free.push_back(&s);
        if (!free.empty()) break;
        if (!dynamic) stop.poll(static_cast<index_t>(k) + 1);  // this visit is under way
        if (!meanwhile()) backoff.pause(waited);
        ctx.timeline.sample(totals);
      }
      backoff.reset();
      const size_t batch = std::min(free.size(), facets.size() - next);
      const auto t_contributions = Clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (size_t b = 0; b < batch; ++b)
        failures.capture([&] {
          if (!compute) return;
          rec.extract_contribution(columns[next + b].view(),
                                   ctx.facet_tile1(facets[next + b]).offset,
                                   ctx.subgrid_tile1(v.subgrid).offset, free[b]->buffer.view());
        });
      failures.rethrow();
      if (compute) st.stages.contribution_s += seconds_since(t_contributions) * threads;
      for (size_t b = 0; b < batch; ++b) {
        for (const int s : streamers) {
          free[b]->post(ctx.roles.streamer_rank(s),
                        contribution_values * static_cast<index_t>(sizeof(cplx)), ctx.data,
                        static_cast<int>(facets[next + b]), contribution_values);
          ++st.messages_sent;
          st.bytes_sent += contribution_values * static_cast<index_t>(sizeof(cplx));
        }
        ++st.contributions;
      }
      st.send_queue_max = std::max<index_t>(
          st.send_queue_max, std::count_if(slots.begin(), slots.end(),
                                           [](const SendSlot& s) { return !s.requests.empty(); }));
      next += batch;
    }
    progress.update(static_cast<index_t>(k + 1));
    ctx.timeline.sample(totals);
    meanwhile();
  }
  // --duration: the streamers learn where the walk ended (static
  // assignment; the assigner tells them itself).
  if (!dynamic && ctx.deadline) {
    const std::int64_t cut = stop.finish(static_cast<index_t>(ctx.plan.visits.size()), waited);
    out.walk_end = cut < static_cast<std::int64_t>(ctx.plan.visits.size()) ? cut : -1;
    if (ctx.roles.rank == 0)
      for (int s = 0; s < ctx.roles.streamers; ++s)
        MPI_Send(&cut, 1, MPI_INT64_T, ctx.roles.streamer_rank(s), kTagEnd, ctx.control);
  } else if (dynamic && assignments.end() >= 0 &&
             assignments.end() < static_cast<index_t>(ctx.plan.visits.size())) {
    out.walk_end = assignments.end();
  }
  // The last sends.
  for (auto& s : slots)
    while (s.busy())
      if (!meanwhile()) backoff.pause(waited);
  // The residual's last contributions.
  if (receiver) {
    while (!receiver->done())
      if (!receiver->step(st)) backoff.pause(waited);
    receiver->finish();
  }
  progress.finish();
  const double total = seconds_since(t_start);
  st.wait_s = waited;
  st.busy_s = total - waited;
  ctx.timeline.finish(totals());
  return out;
}

}  // namespace iotest::pipeline
