// The imaging direction's producer (facet worker): it holds its facets'
// sums and walks the visits in the predict walk's order, receiving each
// facet's contribution of every subgrid from the streamers of the visit's
// parts. Contributions go into a column sum; a column ends when the walk
// leaves it (finish_column), and a w-stack when the walk leaves it: its
// facets are finished, corrected for the kernels and the stack's w
// (correct_facet_adjoint) and added to the dirty image, over the sum of
// the weights (in Jy/beam, degrid::dirty_image_scale). The split parts of
// a visit each send their own contribution; the transform is linear, so
// they are added one after the other. With --image the producers then
// hand the finished facets to rank 0, the image writer (write_image).
#include <algorithm>
#include <numeric>
#include <optional>

#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/image/image_file.hpp"
#include "iotest/pipeline/image_receiver.hpp"

namespace iotest::pipeline {

ImageReceiver::ImageReceiver(Context& ctx, std::vector<Array2D>& sums, index_t slots,
                             Assignments& assignments)
    : ctx_(ctx),
      rec_(*ctx.rec),
      facets_(ctx.facets_of_producer()),
      own_(static_cast<index_t>(facets_.size())),
      visits_(static_cast<index_t>(ctx.plan.visits.size())),
      threads_(ctx.producer_threads),
      sums_(sums),
      slots_(static_cast<size_t>(slots)),
      assignments_(assignments),
      progress_(ctx.options.progress && ctx.roles.rank == 0 &&
                    ctx.options.direction == swiftly::Direction::image,
                visits_, "subgrids") {
  for (index_t i = 0; i < own_; ++i) columns_.push_back(rec_.make_column());
  for (int t = 0; t < threads_; ++t) {
    column_ws_.emplace_back(ctx.job.p);
    facet_ws_.push_back(rec_.make_facet());
  }
  for (auto& s : slots_) {
    s.buffer = rec_.make_contribution();
    free_.push_back(&s);
  }
}

void ImageReceiver::finish_column() {
  if (column_ < 0) return;
  const index_t off0 = ctx_.subgrid_tiles[static_cast<size_t>(column_)].offset;
#pragma omp parallel for schedule(dynamic) num_threads(threads_)
  for (index_t f = 0; f < own_; ++f)
    failures_.capture([&] {
      rec_.finish_column(columns_[static_cast<size_t>(f)].view(),
                         ctx_.facet_tile0(facets_[static_cast<size_t>(f)]).offset, off0,
                         column_ws_[static_cast<size_t>(omp_get_thread_num())],
                         sums_[static_cast<size_t>(f)].view());
    });
  failures_.rethrow();
  column_ = -1;
}

void ImageReceiver::finish_stack() {
  finish_column();
  if (stack_ == kNoStack) return;
  // The imaging direction grids every visibility the binning makes
  // (imaging_results checks it), so the sum of the weights is known before
  // the walk ends.
  const double scale = degrid::dirty_image_scale(ctx_.binner->visibility_count());
#pragma omp parallel for schedule(dynamic) num_threads(threads_)
  for (index_t f = 0; f < own_; ++f)
    failures_.capture([&] {
      auto& facet = facet_ws_[static_cast<size_t>(omp_get_thread_num())];
      auto& sum = sums_[static_cast<size_t>(f)];
      const index_t g = facets_[static_cast<size_t>(f)];
      rec_.finish_facet(sum.view(), facet.view());
      std::fill(sum.data(), sum.data() + sum.size(), cplx{});
      ctx_.degridder->correct_facet_adjoint(ctx_.facet_tile0(g), ctx_.facet_tile1(g), stack_,
                                            facet.view());
      auto& image = ctx_.image_facets[static_cast<size_t>(f)];
      for (index_t x = 0; x < image.size(); ++x) image.data()[x] += scale * facet.data()[x];
    });
  failures_.rethrow();
  stack_ = kNoStack;
}

bool ImageReceiver::step(report::RankFigures& st) {
  const auto& visits = ctx_.plan.visits;
  const index_t values = ctx_.job.p.m * ctx_.job.p.m;
  bool progressed = false;
  // Receives, in walk order, into the free slots.
  while (!free_.empty() && k_ < visits_ && own_ > 0) {
    const auto& v = visits[static_cast<size_t>(k_)];
    if (!streamers_known_) {
      if (!assignments_.known(v)) break;  // the assigner has yet to hand out visit k
      double unused = 0;
      assignments_.streamers_of(k_, v, streamers_, unused);
      streamers_known_ = true;
    }
    Slot* s = free_.back();
    free_.pop_back();
    s->visit = k_;
    s->facet = i_;
    MPI_Irecv(s->buffer.data(), static_cast<int>(values), MPI_C_DOUBLE_COMPLEX,
              ctx_.roles.streamer_rank(streamers_[static_cast<size_t>(j_)]),
              static_cast<int>(facets_[static_cast<size_t>(i_)]), ctx_.data, &s->request);
    posted_.push_back(s);
    progressed = true;
    if (++i_ < own_) continue;
    i_ = 0;
    if (++j_ < v.parts) continue;
    j_ = 0;
    ++k_;
    streamers_known_ = false;
  }
  st.send_queue_max = std::max(st.send_queue_max, static_cast<index_t>(posted_.size()));
  // The completed receives at the head: one visit, each facet once (the
  // parts of a split visit add to the same column sums).
  batch_.clear();
  while (batch_.size() < posted_.size()) {
    Slot* s = posted_[batch_.size()];
    if (!batch_.empty() && (s->visit != batch_.front()->visit ||
                            std::any_of(batch_.begin(), batch_.end(),
                                        [&](const Slot* b) { return b->facet == s->facet; })))
      break;
    int done = 0;
    MPI_Test(&s->request, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    batch_.push_back(s);
  }
  if (batch_.empty()) return progressed;
  const index_t visit = batch_.front()->visit;
  const auto& v = visits[static_cast<size_t>(visit)];
  if (v.stack != stack_) {
    finish_stack();
    stack_ = v.stack;
  }
  if (const index_t i0 = v.subgrid / ctx_.job.p.subgrids_per_axis; i0 != column_) {
    finish_column();
    column_ = i0;
  }
  const index_t off1 = ctx_.subgrid_tile1(v.subgrid).offset;
#pragma omp parallel for schedule(dynamic) num_threads(threads_)
  for (size_t b = 0; b < batch_.size(); ++b)
    failures_.capture([&] {
      const index_t f = batch_[b]->facet;
      rec_.add_to_column(batch_[b]->buffer.view(),
                         ctx_.facet_tile1(facets_[static_cast<size_t>(f)]).offset, off1,
                         columns_[static_cast<size_t>(f)].view());
    });
  failures_.rethrow();
  for (auto* s : batch_) {
    posted_.pop_front();
    free_.push_back(s);
    ++st.messages_received;
    st.bytes_received += values * static_cast<index_t>(sizeof(cplx));
  }
  // A visit is done once its last contribution is in.
  if ((posted_.empty() || posted_.front()->visit != visit) && k_ > visit)
    progress_.update(visit + 1);
  return true;
}

void ImageReceiver::finish() {
  finish_stack();
  progress_.finish();
}

RankResult run_image_producer(Context& ctx) {
  RankResult out;
  auto& st = out.stats;
  Assignments assignments(ctx);
  ImageReceiver receiver(ctx, ctx.facet_sums, ctx.options.send_queue * ctx.producer_threads,
                         assignments);
  Backoff backoff;
  double waited = 0;
  const auto t_start = Clock::now();
  while (!receiver.done())
    if (receiver.step(st))
      backoff.reset();
    else
      backoff.pause(waited);
  receiver.finish();
  st.contributions = st.messages_received;
  const double total = seconds_since(t_start);
  st.wait_s = waited;
  st.busy_s = total - waited;
  return out;
}

report::ImageFile write_image(Context& ctx) {
  const auto& p = ctx.job.p;
  const auto& roles = ctx.roles;
  const auto t_start = Clock::now();
  // The facets in the order their regions lie in the file: by rows (m,
  // south to north), then by columns (l, east to west).
  std::vector<index_t> order(static_cast<size_t>(p.facet_count()));
  std::iota(order.begin(), order.end(), index_t{0});
  const auto region_of = [&](index_t f) {
    return image::facet_region(ctx.facet_tile0(f), ctx.facet_tile1(f), p.used_size);
  };
  std::sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    const auto ra = region_of(a), rb = region_of(b);
    return std::pair{ra.row, ra.column} < std::pair{rb.row, rb.column};
  });
  std::optional<image::ImageWriter> writer;
  if (roles.rank == 0)
    writer.emplace(*ctx.image_claim,
                   image::describe_image(p.name, p.used_size, ctx.job.geometry->pixel_lm,
                                         *ctx.job.obs, ctx.binner->visibility_count()));
  std::vector<cplx> block;
  for (const index_t f : order) {
    const int owner = roles.facet_owner(f);
    if (roles.rank != 0 && roles.rank != owner) continue;
    const auto& t0 = ctx.facet_tile0(f);
    const auto& t1 = ctx.facet_tile1(f);
    // The producers' facets are those of facets_of_producer, in order.
    const auto facet = [&]() -> const Array2D& {
      return ctx.image_facets[static_cast<size_t>(f / roles.producers)];
    };
    if (owner == 0) {  // the writer's own
      writer->write_facet(facet(), t0, t1, p.yB);
      continue;
    }
    const auto region = region_of(f);
    const index_t step = image::block_rows(region);
    block.resize(static_cast<size_t>(step * region.columns));
    for (index_t first = 0; first < region.rows; first += step) {
      const index_t rows = std::min(step, region.rows - first);
      const int values = static_cast<int>(rows * region.columns);
      if (writer) {
        MPI_Recv(block.data(), values, MPI_C_DOUBLE_COMPLEX, owner, kTagImage, ctx.control,
                 MPI_STATUS_IGNORE);
        writer->write_block(region, first, rows, block.data());
      } else {
        image::facet_block(facet(), t0, t1, p.yB, region, first, rows, block.data());
        MPI_Send(block.data(), values, MPI_C_DOUBLE_COMPLEX, 0, kTagImage, ctx.control);
      }
    }
  }
  report::ImageFile figures;
  if (!writer) return figures;
  writer->finish();
  figures.path = ctx.options.image;
  figures.format = writer->fits() ? "fits" : "hdf5";
  figures.used_size = p.used_size;
  figures.bytes = writer->bytes();
  figures.write_s = writer->write_s();
  figures.wall_s = seconds_since(t_start);
  figures.writer_rank = 0;
  return figures;
}

}  // namespace iotest::pipeline
