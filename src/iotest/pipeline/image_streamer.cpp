// The imaging direction's streamer (subgrid worker). Its first thread
// talks to MPI: it takes its parts in walk order, gives each a send slot
// (one contribution per facet) and queues its gridding as one task; it
// posts a slot's sends once the slot is ready and every earlier part's
// sends are posted, so that each producer's receives, posted in walk order,
// match them. When idle it runs a queued task itself. The other threads
// grid: a part's visibilities (read from the input files, or predicted
// from the sky) onto a w-tower, collapsed into the subgrid's image-space
// sum, from which each facet's contribution is extracted into the slot.
// Memory is bounded by --subgrid-queue send slots and one tower a thread.
//
// --direction=both (the self-calibration major cycle) runs both ways in the
// same pass: a slot first receives the model's contributions from the
// producers, as the predict streamer's do; the part's task sums them into
// the model subgrid, builds its w-tower, and for each task reads the
// observed visibilities, degrids the model's, and grids the residual
// (observed minus model); the slot then carries the residual's
// contributions back.
//
// Storage only (--synthetic-vis over a synthetic run's files): the same
// walk, parts and tasks read the same chunks, whose values are checked
// against the pattern; nothing is gridded or sent.
#include <algorithm>
#include <deque>
#include <mutex>
#include <optional>

#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/pipeline/grant_loop.hpp"
#include "iotest/pipeline/roles.hpp"
#include "iotest/pipeline/task_queue.hpp"

namespace iotest::pipeline {
namespace {

// Send buffers for one subgrid part: one contribution per facet.
struct ContributionSlot : PartBuffers {
  // kReceiving: the model's contributions coming in (--direction=both).
  enum class State { kFree, kReceiving, kGridding, kReady, kSending } state = State::kFree;
};

// A gridding thread's tower, subgrid sum and task buffers; with
// --direction=both also the model's.
struct GridThread {
  degrid::Degridder::Workspace tower;
  Array2D sum;
  std::vector<binning::VisRun> runs;
  std::vector<cplx> vis;
  std::optional<degrid::Degridder::Workspace> model_tower;
  Array2D model_sum;
  std::vector<cplx> model;
  double observed2 = 0, residual2 = 0;               // sums of |V|^2: observed, residual
  double degrid_s = 0;                               // the model's tower and degridding
  double grid_s = 0;                                 // the residual's (or the observed) gridding
  std::unique_ptr<chunks::ChunkGatherer> gatherer;   // with input files
  degrid::DirtyPixels dirty;
  index_t visibilities = 0, w_planes = 0, subgrids = 0;
  double busy_s = 0, input_s = 0, check_s = 0;
  index_t values_checked = 0, values_wrong = 0;  // storage only
  GridThread(const swiftly::Recombination& rec, const std::vector<sky::PointSource>& pixels)
      : tower(rec.params()), sum(rec.make_subgrid_sum()), dirty(pixels) {}
};

// One part's gridding as it goes, task by task: where it lies, its w
// range, and the times its tasks spend apart from gridding.
struct PartGrid {
  const binning::VisitRuns& pieces;
  index_t off0 = 0, off1 = 0;
  double w_lo = 0, w_hi = 0;
  index_t gpu_planes = 0;  // planes per task on the GPU (it builds a tower per task)
  MView2D sum{};
  double input_s = 0, check_s = 0, degrid_s = 0;
};

// One imaging streamer's run: its buffers and tallies, the first thread's
// loop (one turn: grants, parts into slots, the model's receives, gridded
// slots, sends in walk order, sends done) and the tasks it queues (a
// part's gridding, or in storage only its reading). Members, not a
// closure's captures, so that each step is a function of its own.
struct ImageStreamer : StreamerRun {
  const bool synthetic = o.synthetic_vis;  // storage only: no degridder
  const degrid::Degridder* degridder_or_null = ctx.degridder.get();
  const telescope::Observation& obs = *ctx.job.obs;
  const bool check = !ctx.pixels.empty();
  const bool both = ctx.both();

  std::vector<const storage::Reader*> readers;
  std::mutex read_lock;  // a Reader takes one thread at a time
  std::vector<GridThread> state;
  std::vector<ContributionSlot> slots;
  Handoff gridded;                // slots whose contributions are extracted
  std::deque<size_t> send_order;  // slots taken, in walk order, not yet sending
  Progress progress{o.progress && ctx.roles.rank == 0,
                    dynamic ? 0 : static_cast<index_t>(grants.todo().size()), "subgrids"};
  index_t sent_parts = 0;
  index_t held = 0;  // slots not free, at the last turn's end

  explicit ImageStreamer(Context& c);
  RankResult run();

  void read_part(size_t slot_index, int thread);
  void grid_part(size_t slot_index, int thread);
  double sum_model(GridThread& ts, const ContributionSlot& slot);
  void grid_task(GridThread& ts, PartGrid& g, index_t first, index_t last);
  LoopTurn turn();
  bool take_parts();
  bool test_model_receives();
  bool take_gridded();
  bool post_sends();
  bool test_sends();
  void tally(double total);
};

ImageStreamer::ImageStreamer(Context& c) : StreamerRun(c) {
  for (const auto& f : ctx.inputs) readers.push_back(f.get());
  for (int t = 0; t < threads; ++t) {
    state.emplace_back(rec, ctx.pixels);
    auto& ts = state.back();
    // The largest tower any visit needs, and a whole task's buffer, now:
    // the memory model holds from the first visit on.
    // On the GPU the towers are the GPU's: the host keeps only the sums.
    while (!gpu && static_cast<index_t>(ts.tower.planes.size()) < ctx.tower_planes)
      ts.tower.planes.emplace_back(p.xA, p.xA);
    ts.vis.assign(static_cast<size_t>(ctx.task_visibilities), cplx{});
    ts.vis.clear();
    if (!readers.empty()) ts.gatherer = std::make_unique<chunks::ChunkGatherer>(readers, read_lock);
    if (both) {
      ts.model_tower.emplace(p);
      while (!gpu && static_cast<index_t>(ts.model_tower->planes.size()) < ctx.tower_planes)
        ts.model_tower->planes.emplace_back(p.xA, p.xA);
      ts.model_sum = rec.make_subgrid_sum();
      ts.model.assign(static_cast<size_t>(ctx.task_visibilities), cplx{});
      ts.model.clear();
    }
  }
  slots.resize(static_cast<size_t>(o.subgrid_queue));
  for (auto& s : slots) s.contributions = AlignedBuffer(synthetic ? 1 : F * values);
}

// Storage only: a part's chunks read in its tasks' order, the values
// checked against the pattern.
void ImageStreamer::read_part(size_t slot_index, int thread) {
  auto& ts = state[static_cast<size_t>(thread)];
  const auto t0 = Clock::now();
  const auto& part = ctx.plan.parts[static_cast<size_t>(slots[slot_index].part)];
  const auto& visit = ctx.plan.visits[static_cast<size_t>(part.visit)];
  const binning::VisitRuns pieces(*ctx.binner, visit.stack, visit.subgrid, part.part, visit.parts);
  for (const auto& [first, last] : pieces.tasks(o.bls_per_task, degrid::kTaskVisibilities)) {
    pieces.runs(first, last, ts.runs);
    for (const auto& run : ts.runs) {
      const index_t row = index_t{run.baseline} * obs.time.steps + run.time;
      ts.vis.resize(static_cast<size_t>(run.count()));
      ts.gatherer->gather(row, run.chan_begin, run.count(), ts.vis.data());
      for (index_t x = 0; x < run.count(); ++x)
        ts.values_wrong += ts.vis[static_cast<size_t>(x)] !=
                           degrid::synthetic_visibility(run.baseline, run.time, run.chan_begin + x,
                                                        ctx.input_nonce);
      ts.values_checked += run.count();
      ts.visibilities += run.count();
    }
    ts.gatherer->clear();
  }
  ++ts.subgrids;
  ts.busy_s += seconds_since(t0);
  gridded.give(slot_index);
}

// Both: the model subgrid, from the producers' contributions; its time.
double ImageStreamer::sum_model(GridThread& ts, const ContributionSlot& slot) {
  const auto td = Clock::now();
  auto model = ts.model_sum.view();
  std::fill(model.data, model.data + p.xM * p.xM, cplx{});
  for (index_t f = 0; f < F; ++f)
    rec.add_contribution(CView2D(slot.contributions.data() + f * values, p.m, p.m),
                         ctx.facet_tile0(f).offset, ctx.facet_tile1(f).offset, model);
  return seconds_since(td);
}

// One part, as a task: its visibilities onto this thread's tower (one
// thread per tower: the part's tasks add to the same planes), the tower
// collapsed into the subgrid's sum, each facet's contribution extracted.
// Both: the model's tower first, and the residual gridded.
void ImageStreamer::grid_part(size_t slot_index, int thread) {
  const auto& degridder = *degridder_or_null;
  auto& ts = state[static_cast<size_t>(thread)];
  const auto t0 = Clock::now();
  const double read0 = ts.gatherer ? ts.gatherer->tally().seconds : 0;
  ContributionSlot& slot = slots[slot_index];
  const auto& part = ctx.plan.parts[static_cast<size_t>(slot.part)];
  const auto& visit = ctx.plan.visits[static_cast<size_t>(part.visit)];
  const binning::VisitRuns pieces(*ctx.binner, visit.stack, visit.subgrid, part.part, visit.parts);
  PartGrid g{pieces};
  g.off0 = ctx.subgrid_tile0(visit.subgrid).offset;
  g.off1 = ctx.subgrid_tile1(visit.subgrid).offset;
  g.sum = ts.sum.view();
  std::fill(g.sum.data, g.sum.data + p.xM * p.xM, cplx{});
  if (both) g.degrid_s += sum_model(ts, slot);
  if (pieces.w_range(g.w_lo, g.w_hi)) {  // a part may hold no visibilities: it sends zeros
    const double wc_lo = g.w_lo / degridder.planes().dw, wc_hi = g.w_hi / degridder.planes().dw;
    // The GPU builds a tower per task (both ways), the CPU one per part.
    g.gpu_planes = degrid::tower_planes(ctx.job.w, ctx.job.kernel.w_support, wc_lo, wc_hi).count;
    if (both && !gpu) {
      const auto td = Clock::now();
      ts.w_planes += degridder.build_tower(ts.model_sum.view(), wc_lo, wc_hi, *ts.model_tower);
      g.degrid_s += seconds_since(td);
    }
    if (!gpu) ts.w_planes += degridder.begin_tower(wc_lo, wc_hi, ts.tower);
    for (const auto& [first, last] : pieces.tasks(o.bls_per_task, degrid::kTaskVisibilities))
      grid_task(ts, g, first, last);
    if (!gpu) degridder.collapse_tower(ts.tower, g.sum);
  }
  for (index_t f = 0; f < F; ++f)
    rec.extract_from_subgrid(g.sum, ctx.facet_tile0(f).offset, ctx.facet_tile1(f).offset,
                             MView2D(slot.contributions.data() + f * values, p.m, p.m));
  ++ts.subgrids;
  ts.degrid_s += g.degrid_s;
  ts.input_s += g.input_s;
  ts.check_s += g.check_s;
  const double busy = seconds_since(t0) - g.input_s - g.check_s;
  ts.busy_s += busy;
  ts.grid_s += busy - g.degrid_s - (ts.gatherer ? ts.gatherer->tally().seconds - read0 : 0);
  gridded.give(slot_index);
}

// One task of a part: baselines [first, last) read or predicted, with
// --direction=both less the model's, gridded onto the tower.
void ImageStreamer::grid_task(GridThread& ts, PartGrid& g, index_t first, index_t last) {
  const auto& degridder = *degridder_or_null;
  g.pieces.runs(first, last, ts.runs);
  const auto* begin = ts.runs.data();
  const auto* end = begin + ts.runs.size();
  index_t n = 0;
  for (const auto* run = begin; run != end; ++run) n += run->count();
  const auto ti = Clock::now();
  if (ts.gatherer) {  // reading is imaging's own work: timed
    ts.vis.resize(static_cast<size_t>(n));
    degrid::gather_runs(*ts.gatherer, obs.time.steps, begin, end, ts.vis.data());
  } else {  // predicting them is not: measured apart
    degrid::predict_direct(degridder, ctx.job.sources, begin, end, ts.vis);
    g.input_s += seconds_since(ti);
  }
  if (both) {  // the residual: observed minus the model's visibilities
    const auto td = Clock::now();
    if (gpu) {
      gpu->degrid(begin, end, g.off0, g.off1, g.w_lo, g.w_hi, ts.model_sum.data(), ts.model);
      ts.w_planes += g.gpu_planes;
    } else {
      ts.model.clear();
      degridder.degrid(begin, end, g.off0, g.off1, *ts.model_tower, ts.model);
    }
    for (index_t x = 0; x < n; ++x) {
      cplx& v = ts.vis[static_cast<size_t>(x)];
      ts.observed2 += std::norm(v);
      v -= ts.model[static_cast<size_t>(x)];
      ts.residual2 += std::norm(v);
    }
    g.degrid_s += seconds_since(td);
  }
  if (gpu) {
    gpu->grid(begin, end, g.off0, g.off1, g.w_lo, g.w_hi, ts.vis.data(), g.sum.data);
    ts.w_planes += g.gpu_planes;
  } else {
    degridder.grid(begin, end, g.off0, g.off1, ts.vis.data(), ts.tower);
  }
  ts.visibilities += n;
  if (check) {  // untimed: the same visibilities into the sampled pixels
    const auto tc = Clock::now();
    ts.dirty.add(degridder, begin, end, ts.vis.data());
    g.check_s += seconds_since(tc);
  }
}

// The next parts, into free slots, in walk order: with --direction=both
// the model's contributions are received first, else the part is queued.
bool ImageStreamer::take_parts() {
  return grants.fill(slots, [&](size_t i) {
    ContributionSlot& s = slots[i];
    send_order.push_back(i);
    if (both) {
      s.state = ContributionSlot::State::kReceiving;
      contributions.post_receives(s);
      return;
    }
    s.state = ContributionSlot::State::kGridding;
    if (synthetic)
      tasks.push([this, i](int t) { read_part(i, t); });
    else
      tasks.push([this, i](int t) { grid_part(i, t); });
  });
}

// Slots whose model is in: their parts' tasks.
bool ImageStreamer::test_model_receives() {
  bool progressed = false;
  for (size_t i = 0; i < slots.size(); ++i) {
    ContributionSlot& s = slots[i];
    if (s.state != ContributionSlot::State::kReceiving || !contributions.received(s)) continue;
    s.state = ContributionSlot::State::kGridding;
    tasks.push([this, i](int t) { grid_part(i, t); });
    progressed = true;
  }
  return progressed;
}

// Gridded slots are ready to send. Storage only: nothing to send, the
// slot is free at once.
bool ImageStreamer::take_gridded() {
  const std::vector<size_t> done = gridded.take();
  for (const size_t i : done) {
    slots[i].state = synthetic ? ContributionSlot::State::kFree : ContributionSlot::State::kReady;
    if (synthetic) {
      std::erase(send_order, i);
      grants.request(1);
      progress.update(++sent_parts);
    }
  }
  return !done.empty();
}

// Sends, in walk order: the producers' receives match them so.
bool ImageStreamer::post_sends() {
  bool progressed = false;
  while (!send_order.empty() && slots[send_order.front()].state == ContributionSlot::State::kReady) {
    ContributionSlot& s = slots[send_order.front()];
    send_order.pop_front();
    contributions.post_sends(s);
    s.state = ContributionSlot::State::kSending;
    progressed = true;
  }
  return progressed;
}

// Completed sends free their slots, and ask for as many parts.
bool ImageStreamer::test_sends() {
  index_t freed = 0;
  held = 0;
  for (auto& s : slots) {
    if (s.state == ContributionSlot::State::kSending && contributions.sent(s)) {
      s.state = ContributionSlot::State::kFree;
      ++freed;
    }
    if (s.state != ContributionSlot::State::kFree) ++held;
  }
  st.subgrid_queue_max = std::max(st.subgrid_queue_max, held);
  if (freed == 0) return false;
  grants.request(freed);
  sent_parts += freed;
  progress.update(sent_parts);
  return true;
}

LoopTurn ImageStreamer::turn() {
  LoopTurn turn;
  turn.progressed = grants.poll();
  turn.progressed = take_parts() || turn.progressed;
  turn.progressed = test_model_receives() || turn.progressed;
  turn.progressed = take_gridded() || turn.progressed;
  turn.progressed = post_sends() || turn.progressed;
  turn.progressed = test_sends() || turn.progressed;
  turn.finished = grants.done() && held == 0;
  // Waiting on producers while sends (or the model's receives) are
  // posted, else on the gridding threads.
  turn.waiting = std::any_of(slots.begin(), slots.end(), [](const ContributionSlot& s) {
    return s.state == ContributionSlot::State::kSending || s.state == ContributionSlot::State::kReceiving;
  });
  return turn;
}

// The threads' figures into the rank's; the dirty pixels' sums scaled.
void ImageStreamer::tally(double total) {
  double input_s = 0, check_s = 0;
  out.dirty_sums.assign(ctx.pixels.size(), cplx{});
  for (const auto& ts : state) {
    st.visibilities += ts.visibilities;
    st.w_planes += ts.w_planes;
    st.subgrids += ts.subgrids;
    input_s = std::max(input_s, ts.input_s);
    out.degrid_s = std::max(out.degrid_s, ts.degrid_s);
    out.values_checked += ts.values_checked;
    out.values_wrong += ts.values_wrong;
    out.grid_s = std::max(out.grid_s, ts.grid_s);
    out.observed2 += ts.observed2;
    out.residual2 += ts.residual2;
    check_s = std::max(check_s, ts.check_s);
    for (size_t i = 0; i < out.dirty_sums.size(); ++i) out.dirty_sums[i] += ts.dirty.sums[i];
    if (ts.gatherer) out.read.add(ts.gatherer->tally());
  }
  // Normalised as the producers normalise the image (image_producer.cpp):
  // over the whole run's weights, so the streamers' shares add up.
  const double scale = degrid::dirty_image_scale(ctx.binner->visibility_count());
  for (auto& sum : out.dirty_sums) sum *= scale;
  out.input_s = input_s;
  out.check_s = check_s;
  if (gpu) out.gpu = gpu->timing();
  st.wait_s = wait_s;
  st.idle_s = idle_s;
  // Predicting visibilities in memory and the checks ran inside tasks: the
  // slowest thread's share of them is not the pipeline's work.
  st.busy_s = std::max(0.0, total - wait_s - idle_s - input_s - check_s);
}

RankResult ImageStreamer::run() {
  const auto t_start = Clock::now();
  grants.request(o.subgrid_queue);
  run_loop(tasks, threads, wait_s, idle_s, [this] { return turn(); });
  progress.finish();
  st.task_queue_max = tasks.high_water();
  tally(seconds_since(t_start));
  return out;
}

}  // namespace

RankResult run_image_streamer(Context& ctx) { return ImageStreamer(ctx).run(); }


}  // namespace iotest::pipeline
