// The streamer (subgrid worker). Its first thread receives: it keeps
// --subgrid-queue subgrids' receives posted, in walk order, and starts a
// subgrid once all its contributions are in; when nothing arrives it runs
// queued work itself instead of sleeping. The other threads run that work:
// assembling subgrids (sum of contributions, w-tower) and degrid tasks of
// --bls-per-task baselines' time chunks, which hand whole chunks to the
// writers. Every queue is bounded, so memory is too.
// The queue is task_queue.hpp's.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/pipeline/grant_loop.hpp"
#include "iotest/pipeline/roles.hpp"
#include "iotest/pipeline/task_queue.hpp"
#include "iotest/pipeline/writers.hpp"

namespace iotest::pipeline {
namespace {

// Receive buffers for one subgrid: one contribution per facet.
struct Slot : PartBuffers {
  enum class State { kFree, kReceiving, kReady, kAssembling } state = State::kFree;
};

// A subgrid being degridded: its sum and w-tower, and its part's track
// pieces (made when it starts, dropped with it), kept until its last task.
struct Tower {
  Array2D sum;
  degrid::Degridder::Workspace ws;
  std::optional<binning::VisitRuns> visit;
  std::atomic<index_t> tasks_left{0};
  std::atomic<bool> skipped{false};  // --duration: a task of it did not run
  double w_lo = 0, w_hi = 0;         // the part's w range (the GPU builds its towers)
  Tower(const swiftly::Recombination& rec) : sum(rec.make_subgrid_sum()), ws(rec.params()) {}
};

struct ThreadState {
  std::vector<binning::VisRun> runs;  // the current task's
  std::vector<cplx> vis;
  chunks::ChunkAssembler chunks;
  chunks::ChunkCover cover;  // --synthetic-vis: which values of the open chunks the runs cover
  Array2D scratch, subgrid, reference;
  RelativeError vis_error;
  ErrorTally subgrid_errors;
  std::vector<storage::WrittenPart> written;  // --duration: the tasks done
  index_t vis_checked = 0, visibilities = 0, w_planes = 0, subgrids = 0;
  double busy_s = 0, check_s = 0;
  report::StageSeconds stages;
  ThreadState(const swiftly::Recombination& rec, const storage::VisibilityLayout& layout)
      : chunks(layout),
        cover(layout),
        scratch(rec.make_subgrid_sum()),
        subgrid(rec.make_subgrid()),
        reference(rec.make_subgrid()) {}
};

// One streamer's run: its buffers and tallies, the first thread's loop
// (one turn: grants, the walk's end, receives, freed slots, subgrids
// started) and the tasks it queues (a subgrid's assembly, its degrid
// tasks). Members, not a closure's captures, so that each step is a
// function of its own.
struct Streamer : StreamerRun {
  const bool with_vis = ctx.job.obs.has_value();
  const bool zero_data = ctx.roles.producers == 0;
  // Storage only: the same walk, parts, tasks and chunks, a pattern for values.
  const bool synthetic = o.synthetic_vis;
  Writers* writers = ctx.writers.get();

  // Which visits to check against the direct transform: spread over the walk.
  const index_t visits = static_cast<index_t>(ctx.plan.visits.size());
  const index_t check =
      zero_data || ctx.job.sources.empty() ? 0 : std::min(o.check_subgrids, visits);
  const sky::UnitRoots roots{check > 0 ? p.N : 1};
  const std::vector<index_t> samples =
      with_vis ? degrid::pick_samples(*ctx.job.obs, o.vis_samples, o.seed) : std::vector<index_t>{};

  std::vector<ThreadState> state;
  std::vector<Slot> slots;
  std::vector<std::unique_ptr<Tower>> towers;
  std::mutex tower_lock;  // guards free_towers
  std::vector<Tower*> free_towers;
  Handoff released;  // slots whose contributions are summed
  std::atomic<index_t> parts_done{0}, tasks_skipped{0};
  std::atomic<index_t> degridded{0};  // visibilities, for the time line
  // --duration, static assignment with producers: producer 0 says where
  // the walk ended; until then the streamer may not leave.
  const bool await_end = ctx.deadline && !dynamic && !zero_data;
  bool end_known = false;

  std::deque<size_t> ready;  // slots received, not yet assembling
  Progress progress{o.progress && ctx.roles.rank == 0,
                    dynamic ? 0 : static_cast<index_t>(grants.todo().size()), "subgrids"};
  index_t assembled = 0;

  explicit Streamer(Context& c);
  RankResult run();

  bool checked(index_t k) const {
    return check > 0 && (k * check) % visits < check;  // about `check` visits, evenly spaced
  }
  void release_tower(Tower* t) {
    const std::lock_guard<std::mutex> hold(tower_lock);
    free_towers.push_back(t);
  }
  void assemble(size_t slot_index, Tower* tower, int thread);
  void check_subgrid(ThreadState& ts, CView2D sum, const Visit& visit, index_t off0, index_t off1);
  void degrid_task(Tower* tower, index_t first, index_t last, index_t off0, index_t off1, int t);
  LoopTurn turn();
  bool take_walk_end();
  bool post_receives();
  bool test_receives();
  bool free_slots();
  bool start_subgrids();
  StageTotals totals() const;
  void tally(double total);
};

Streamer::Streamer(Context& c) : StreamerRun(c) {
  for (int t = 0; t < threads; ++t) state.emplace_back(rec, ctx.layout);
  slots.resize(static_cast<size_t>(o.subgrid_queue));
  for (auto& s : slots) s.contributions = AlignedBuffer(zero_data ? 1 : F * values);
  for (int t = 0; t < threads + 1; ++t) {
    towers.push_back(std::make_unique<Tower>(rec));
    // The largest tower any visit needs, and a whole task's buffer, now:
    // the memory model holds from the first visit on. On the GPU the
    // towers are the GPU's: the host keeps only the sums.
    while (!gpu && static_cast<index_t>(towers.back()->ws.planes.size()) < ctx.tower_planes)
      towers.back()->ws.planes.emplace_back(p.xA, p.xA);
    // Synthetic: the chunks are made in the writers' queues, with no task buffer.
    if (t < threads && !synthetic) {
      state[static_cast<size_t>(t)].vis.assign(static_cast<size_t>(ctx.task_visibilities), cplx{});
      state[static_cast<size_t>(t)].vis.clear();
    }
    free_towers.push_back(towers.back().get());
  }
}

// One subgrid, as a task: sum its contributions, free its slot, check it,
// build the tower and queue its degrid tasks.
void Streamer::assemble(size_t slot_index, Tower* tower, int thread) {
  auto& ts = state[static_cast<size_t>(thread)];
  const auto t0 = Clock::now();
  Slot& slot = slots[slot_index];
  const auto& part = ctx.plan.parts[static_cast<size_t>(slot.part)];
  const auto& visit = ctx.plan.visits[static_cast<size_t>(part.visit)];
  auto sum = tower->sum.view();
  // --duration: past the deadline parts are still received (so producers
  // reach the agreed end of the walk) but not degridded.
  const bool stopped = ctx.past_deadline();
  if (!synthetic) std::fill(sum.data, sum.data + p.xM * p.xM, cplx{});
  if (!zero_data)
    for (index_t f = 0; f < F; ++f)
      rec.add_contribution(CView2D(slot.contributions.data() + f * values, p.m, p.m),
                           ctx.facet_tile0(f).offset, ctx.facet_tile1(f).offset, sum);
  ts.stages.assembly_s += seconds_since(t0);
  released.give(slot_index);
  ++ts.subgrids;
  const index_t off0 = ctx.subgrid_tile0(visit.subgrid).offset;
  const index_t off1 = ctx.subgrid_tile1(visit.subgrid).offset;
  if (part.part == 0 && checked(part.visit)) check_subgrid(ts, sum, visit, off0, off1);
  // Without visibilities, or past the deadline, the tower is not needed.
  // Otherwise the part's pieces of track, from the tracks: nothing per
  // visibility is kept beyond a task.
  if (!with_vis || stopped) {
    release_tower(tower);
    ts.busy_s += seconds_since(t0);
    return;
  }
  const auto t_pieces = Clock::now();
  tower->visit.emplace(*ctx.binner, visit.stack, visit.subgrid, part.part, visit.parts);
  const auto& pieces = *tower->visit;
  ts.stages.pieces_s += seconds_since(t_pieces);
  double w_lo = 0, w_hi = 0;
  if (!pieces.w_range(w_lo, w_hi)) {
    tower->visit.reset();
    ++parts_done;
    release_tower(tower);
    ts.busy_s += seconds_since(t0);
    return;
  }
  const auto t_tower = Clock::now();
  tower->w_lo = w_lo, tower->w_hi = w_hi;
  if (!synthetic && !gpu)
    ts.w_planes += ctx.degridder->build_tower(sum, w_lo / ctx.degridder->planes().dw,
                                              w_hi / ctx.degridder->planes().dw, tower->ws,
                                              pieces, off1);
  ts.stages.tower_s += seconds_since(t_tower);
  const auto cuts = pieces.tasks(o.bls_per_task, degrid::kTaskVisibilities);
  tower->tasks_left = static_cast<index_t>(cuts.size());
  tower->skipped = false;
  ts.busy_s += seconds_since(t0);
  for (const auto& [first, last] : cuts)
    tasks.push([this, tower, first, last, off0, off1](int t) {
      degrid_task(tower, first, last, off0, off1, t);
    });
}

// Untimed: the subgrid against the direct transform of the sky.
void Streamer::check_subgrid(ThreadState& ts, CView2D sum, const Visit& visit, index_t off0,
                             index_t off1) {
  const auto tc = Clock::now();
  rec.finish_subgrid_copy(sum, ts.scratch.view(), ts.subgrid.view());
  std::vector<cplx> amplitudes;
  if (ctx.degridder)
    for (const auto& s : ctx.job.sources)
      amplitudes.push_back(ctx.degridder->facet_correction(
          static_cast<double>(s.y0), static_cast<double>(s.y1), visit.stack));
  sky::dft_subgrid(ctx.job.sources, roots, off0, off1, ts.reference.view(), amplitudes);
  RelativeError e;
  e.add(ts.subgrid.view(), ts.reference.view());
  ts.subgrid_errors.add(e);
  ts.check_s += seconds_since(tc);
}

// One degrid task: baselines [first, last) of the tower's part, their
// chunks to the writers; the part's last task frees the tower.
void Streamer::degrid_task(Tower* tower, index_t first, index_t last, index_t off0, index_t off1,
                           int t) {
  auto& ds = state[static_cast<size_t>(t)];
  const auto finish_task = [&] {
    if (--tower->tasks_left > 0) return;
    if (!tower->skipped) ++parts_done;
    tower->visit.reset();
    release_tower(tower);
  };
  if (ctx.past_deadline()) {  // --duration: no new work
    ++tasks_skipped;
    tower->skipped = true;
    finish_task();
    return;
  }
  const auto td = Clock::now();
  tower->visit->runs(first, last, ds.runs);
  const auto* begin = ds.runs.data();
  const auto* end = begin + ds.runs.size();
  const auto to_writers = [&](const storage::ChunkKey& key, const cplx* data, index_t n,
                              const storage::PresenceWord* present) {
    writers->write(key, data, n, present);
  };
  index_t visibilities = 0;
  if (synthetic) {
    visibilities = degrid::synthesize_to_chunks(
        ctx.nonce, begin, end, ds.cover,
        [&](const storage::ChunkKey& key, index_t n, const storage::PresenceWord* present,
            const chunks::MakeChunk& make) { writers->write_made(key, n, present, make); });
  } else if (gpu) {  // the task's tower and taps on the GPU, its chunks here
    gpu->degrid(begin, end, off0, off1, tower->w_lo, tower->w_hi, tower->sum.data(), ds.vis);
    degrid::runs_to_chunks(ctx.job.obs->time.steps, begin, end, ds.vis.data(), ds.chunks,
                           to_writers);
    const double dw = ctx.degridder->planes().dw;
    ds.w_planes +=
        degrid::tower_planes(ctx.job.w, ctx.job.kernel.w_support, tower->w_lo / dw, tower->w_hi / dw)
            .count;
  } else {
    degrid::degrid_to_chunks(*ctx.degridder, begin, end, off0, off1, tower->ws, ds.vis, ds.chunks,
                             to_writers);
  }
  if (!synthetic) visibilities = static_cast<index_t>(ds.vis.size());
  ds.visibilities += visibilities;
  degridded += visibilities;
  if (ctx.deadline) {
    const auto& done = *tower->visit;
    ds.written.push_back(
        {done.stack(), done.subgrid(), done.row_chunk(first), done.row_chunk(last - 1) + 1});
  }
  ds.busy_s += seconds_since(td);
  ds.stages.degrid_task_s += seconds_since(td);
  const auto tc = Clock::now();
  if (!zero_data && !ctx.job.sources.empty())
    ds.vis_checked += degrid::check_samples(*ctx.degridder, ctx.job.sources, samples, begin, end,
                                            ds.vis.data(), ds.vis_error);
  ds.check_s += seconds_since(tc);
  finish_task();
}

// --duration: the end of the walk, from producer 0; parts past it are
// dropped, and their posted receives cancelled (no producer sends them).
bool Streamer::take_walk_end() {
  if (!await_end || end_known) return false;
  int flag = 0;
  MPI_Iprobe(0 /* producer 0 */, kTagEnd, ctx.control, &flag, MPI_STATUS_IGNORE);
  if (!flag) return false;
  std::int64_t cut = 0;
  MPI_Recv(&cut, 1, MPI_INT64_T, 0 /* producer 0 */, kTagEnd, ctx.control, MPI_STATUS_IGNORE);
  ++st.messages_received;
  end_known = true;
  out.walk_end = cut < visits ? cut : -1;
  const auto past = [&](index_t part) {
    return ctx.plan.parts[static_cast<size_t>(part)].visit >= cut;
  };
  std::erase_if(grants.todo(), past);
  for (auto& slot : slots)
    if (slot.state == Slot::State::kReceiving && past(slot.part)) {
      for (auto& r : slot.requests) MPI_Cancel(&r);
      MPI_Waitall(static_cast<int>(slot.requests.size()), slot.requests.data(),
                  MPI_STATUSES_IGNORE);
      slot.state = Slot::State::kFree;
    }
  return true;
}

// Receives for the next parts, into free slots (without producers there
// is nothing to receive: the slot is ready at once).
bool Streamer::post_receives() {
  return grants.fill(slots, [&](size_t i) {
    Slot& s = slots[i];
    if (zero_data) {
      s.state = Slot::State::kReady;
      ready.push_back(i);
    } else {
      s.state = Slot::State::kReceiving;
      contributions.post_receives(s);
    }
  });
}

// Completed receives: their slots ready to assemble.
bool Streamer::test_receives() {
  bool progressed = false;
  index_t held = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slots[i];
    if (s.state != Slot::State::kFree) ++held;
    if (s.state != Slot::State::kReceiving || !contributions.received(s)) continue;
    if (o.network_only) {  // nothing to assemble: the slot is free at once
      s.state = Slot::State::kAssembling;
      ++state[0].subgrids;
      released.give(i);
    } else {
      s.state = Slot::State::kReady;
      ready.push_back(i);
    }
    progressed = true;
  }
  st.subgrid_queue_max = std::max(st.subgrid_queue_max, held);
  return progressed;
}

// Slots whose contributions are summed: free, and as many parts asked for.
bool Streamer::free_slots() {
  const std::vector<size_t> freed = released.take();
  for (const size_t i : freed) slots[i].state = Slot::State::kFree;
  if (freed.empty()) return false;
  grants.request(static_cast<std::int64_t>(freed.size()));
  assembled += static_cast<index_t>(freed.size());
  progress.update(assembled);
  return true;
}

// Start subgrids while a tower is free and the task queue has room.
bool Streamer::start_subgrids() {
  bool progressed = false;
  while (!ready.empty() && tasks.outstanding() < o.task_queue) {
    Tower* tower = nullptr;
    {
      const std::lock_guard<std::mutex> hold(tower_lock);
      if (free_towers.empty()) break;
      tower = free_towers.back();
      free_towers.pop_back();
    }
    const size_t i = ready.front();
    ready.pop_front();
    slots[i].state = Slot::State::kAssembling;
    tasks.push([this, i, tower](int t) { assemble(i, tower, t); });
    progressed = true;
  }
  return progressed;
}

LoopTurn Streamer::turn() {
  LoopTurn turn;
  turn.progressed = grants.poll();
  turn.progressed = take_walk_end() || turn.progressed;
  if (ctx.deadline && zero_data && ctx.past_deadline()) grants.todo().clear();
  turn.progressed = post_receives() || turn.progressed;
  turn.progressed = test_receives() || turn.progressed;
  turn.progressed = free_slots() || turn.progressed;
  turn.progressed = start_subgrids() || turn.progressed;
  // Waiting on producers while receives are posted, else on the workers.
  turn.waiting = std::any_of(slots.begin(), slots.end(),
                             [](const Slot& s) { return s.state != Slot::State::kFree; });
  turn.finished = grants.done() && ready.empty() && !turn.waiting && tasks.outstanding() == 0 &&
                  (!await_end || end_known);
  if (!turn.finished) ctx.timeline.sample([this] { return totals(); });
  return turn;
}

// The time line's running totals (visibilities from every thread).
StageTotals Streamer::totals() const {
  // Waits on the writers' full queues, in whichever thread, count too.
  return {wait_s + (writers ? writers->wait_s() : 0), idle_s,
          degridded.load(std::memory_order_relaxed), 0, writers ? writers->taken_bytes() : 0};
}

// The threads' figures into the rank's, and the time not waited or idle
// (less the slowest thread's untimed checks) as busy.
void Streamer::tally(double total) {
  double check_s = 0;
  for (const auto& ts : state) {
    st.visibilities += ts.visibilities;
    st.w_planes += ts.w_planes;
    st.subgrids += ts.subgrids;
    out.vis_error.add(ts.vis_error);
    out.vis_checked += ts.vis_checked;
    out.subgrid_error.add(ts.subgrid_errors.pooled);
    out.subgrids_checked += ts.subgrid_errors.items;
    if (ts.subgrid_errors.items > 0)
      out.subgrid_error_worst = std::max(out.subgrid_error_worst, ts.subgrid_errors.worst);
    check_s = std::max(check_s, ts.check_s);
    st.stages += ts.stages;
  }
  if (gpu) out.gpu = gpu->timing();
  st.wait_s = wait_s;
  st.idle_s = idle_s;
  st.busy_s = std::max(0.0, total - wait_s - idle_s - check_s);
}

RankResult Streamer::run() {
  const auto t_start = Clock::now();
  grants.request(o.subgrid_queue);
  run_loop(tasks, threads, wait_s, idle_s, [this] { return turn(); });
  progress.finish();
  st.task_queue_max = tasks.high_water();
  out.parts_done = parts_done;
  out.tasks_skipped = tasks_skipped;
  if (writers) {
    if (ctx.deadline) {  // what the files hold, so verify checks exactly that
      std::vector<storage::WrittenPart> written;
      for (const auto& ts : state) written.insert(written.end(), ts.written.begin(), ts.written.end());
      writers->record_written(storage::merge_written_parts(std::move(written)));
    }
    finish_writers(ctx, out);
    wait_s += out.queue_wait_s;
    out.transit_chunks = ctx.transit_tally.chunks;
    out.transit_bytes = ctx.transit_tally.bytes;
    out.transit_kept_chunks = ctx.transit_tally.kept_chunks;
    out.send_wait_s = ctx.transit_tally.send_wait_s;
  }
  tally(seconds_since(t_start));
  ctx.timeline.finish(totals());
  return out;
}

}  // namespace

RankResult run_streamer(Context& ctx) { return Streamer(ctx).run(); }

}  // namespace iotest::pipeline
