// The imaging direction's producer (facet worker): it holds its facets'
// sums and walks the visits in the predict walk's order, receiving each
// facet's contribution of every subgrid from the streamers of the visit's
// parts, with at most --send-queue x --producer-threads receives posted.
// Contributions go into a column sum; a column ends when the walk leaves
// it (finish_column), and a w-stack when the walk leaves it: its facets
// are finished, corrected for the kernels and the stack's w
// (correct_facet_adjoint) and added to the dirty image. The split parts of
// a visit each send their own contribution; the transform is linear, so
// they are added one after the other.
#include <omp.h>

#include <algorithm>
#include <deque>
#include <stdexcept>

#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/pipeline/roles.hpp"

namespace iotest::pipeline {
namespace {

// One receive buffer: the contribution of one part's subgrid to one facet.
struct ReceiveSlot {
  Array2D buffer;
  MPI_Request request = MPI_REQUEST_NULL;
  index_t visit = -1, facet = -1;  // facet: the index into the producer's facets
};

}  // namespace

RankResult run_image_producer(Context& ctx) {
  RankResult out;
  auto& st = out.stats;
  const auto& p = ctx.job.p;
  const auto& rec = *ctx.rec;
  const auto& visits = ctx.plan.visits;
  const int threads = ctx.producer_threads;
  const std::vector<index_t> facets = ctx.facets_of_producer();
  const index_t own = static_cast<index_t>(facets.size());
  std::vector<Array2D>& facet_sums = ctx.prepared_facets;  // a w-stack's, zeroed in setup
  std::vector<Array2D> columns;
  for (index_t i = 0; i < own; ++i) columns.push_back(rec.make_column());
  std::vector<swiftly::ColumnWorkspace> column_ws;
  std::vector<Array2D> facet_ws;
  for (int t = 0; t < threads; ++t) {
    column_ws.emplace_back(p);
    facet_ws.push_back(rec.make_facet());
  }
  std::vector<ReceiveSlot> slots(static_cast<size_t>(ctx.options.send_queue * threads));
  for (auto& s : slots) s.buffer = rec.make_contribution();
  const index_t values = p.m * p.m;
  Assignments assignments(ctx);
  Progress progress(ctx.options.progress && ctx.roles.rank == 0,
                    static_cast<index_t>(visits.size()), "subgrids");
  ExceptionCollector failures;
  Backoff backoff;
  double waited = 0;
  const auto t_start = Clock::now();

  // The receive cursor: visit k, its part j, facet i (in that order, as
  // every streamer sends them), and the streamers of visit k's parts.
  index_t k = 0, j = 0, i = 0;
  std::vector<int> streamers;
  bool streamers_known = false;
  std::deque<ReceiveSlot*> posted;  // in walk order
  std::vector<ReceiveSlot*> free;
  for (auto& s : slots) free.push_back(&s);

  index_t stack = -1, column = -1;
  const auto finish_column = [&] {
    if (column < 0) return;
    const index_t off0 = ctx.subgrid_tiles[static_cast<size_t>(column)].offset;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t f = 0; f < own; ++f)
      failures.capture([&] {
        rec.finish_column(columns[static_cast<size_t>(f)].view(),
                          ctx.facet_tile0(facets[static_cast<size_t>(f)]).offset, off0,
                          column_ws[static_cast<size_t>(omp_get_thread_num())],
                          facet_sums[static_cast<size_t>(f)].view());
      });
    failures.rethrow();
    column = -1;
  };
  const auto finish_stack = [&] {
    finish_column();
    if (stack < 0) return;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (index_t f = 0; f < own; ++f)
      failures.capture([&] {
        auto& facet = facet_ws[static_cast<size_t>(omp_get_thread_num())];
        auto& sum = facet_sums[static_cast<size_t>(f)];
        const index_t g = facets[static_cast<size_t>(f)];
        rec.finish_facet(sum.view(), facet.view());
        std::fill(sum.data(), sum.data() + sum.size(), cplx{});
        ctx.degridder->correct_facet_adjoint(ctx.facet_tile0(g), ctx.facet_tile1(g), stack,
                                             facet.view());
        auto& image = ctx.image_facets[static_cast<size_t>(f)];
        for (index_t x = 0; x < image.size(); ++x) image.data()[x] += facet.data()[x];
      });
    failures.rethrow();
    stack = -1;
  };

  std::vector<ReceiveSlot*> batch;
  const auto visit_count = static_cast<index_t>(visits.size());
  while (true) {
    bool progressed = false;
    // Receives, in walk order, into the free slots.
    while (!free.empty() && k < visit_count && own > 0) {
      const auto& v = visits[static_cast<size_t>(k)];
      if (!streamers_known) {
        if (!assignments.known(v)) break;  // the assigner has yet to hand out visit k
        double unused = 0;
        assignments.streamers_of(k, v, streamers, unused);
        streamers_known = true;
      }
      ReceiveSlot* s = free.back();
      free.pop_back();
      s->visit = k;
      s->facet = i;
      MPI_Irecv(s->buffer.data(), static_cast<int>(values), MPI_C_DOUBLE_COMPLEX,
                ctx.roles.streamer_rank(streamers[static_cast<size_t>(j)]),
                static_cast<int>(facets[static_cast<size_t>(i)]), ctx.data, &s->request);
      posted.push_back(s);
      progressed = true;
      if (++i < own) continue;
      i = 0;
      if (++j < v.parts) continue;
      j = 0;
      ++k;
      streamers_known = false;
    }
    st.send_queue_max = std::max(st.send_queue_max, static_cast<index_t>(posted.size()));
    if (posted.empty() && (k >= visit_count || own == 0)) break;
    // The completed receives at the head: one visit, each facet once (the
    // parts of a split visit add to the same column sums).
    batch.clear();
    while (batch.size() < posted.size()) {
      ReceiveSlot* s = posted[batch.size()];
      if (!batch.empty() && (s->visit != batch.front()->visit ||
                             std::any_of(batch.begin(), batch.end(),
                                         [&](const ReceiveSlot* b) { return b->facet == s->facet; })))
        break;
      int done = 0;
      MPI_Test(&s->request, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      batch.push_back(s);
    }
    if (batch.empty()) {
      if (!progressed) backoff.pause(waited);
      continue;
    }
    backoff.reset();
    const index_t visit = batch.front()->visit;
    const auto& v = visits[static_cast<size_t>(visit)];
    if (v.stack != stack) {
      finish_stack();
      stack = v.stack;
    }
    if (const index_t i0 = v.subgrid / p.subgrids_per_axis; i0 != column) {
      finish_column();
      column = i0;
    }
    const index_t off1 = ctx.subgrid_tile1(v.subgrid).offset;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
    for (size_t b = 0; b < batch.size(); ++b)
      failures.capture([&] {
        const index_t f = batch[b]->facet;
        rec.add_to_column(batch[b]->buffer.view(),
                          ctx.facet_tile1(facets[static_cast<size_t>(f)]).offset, off1,
                          columns[static_cast<size_t>(f)].view());
      });
    failures.rethrow();
    for (auto* s : batch) {
      posted.pop_front();
      free.push_back(s);
      ++st.messages_received;
      st.bytes_received += values * static_cast<index_t>(sizeof(cplx));
      ++st.contributions;
    }
    // A visit is done once its last contribution is in.
    if (posted.empty() || posted.front()->visit != visit)
      if (k > visit) progress.update(visit + 1);
  }
  finish_stack();
  progress.finish();
  const double total = seconds_since(t_start);
  st.wait_s = waited;
  st.busy_s = total - waited;
  return out;
}

}  // namespace iotest::pipeline
