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
#include "iotest/pipeline/roles.hpp"
#include "iotest/pipeline/task_queue.hpp"

namespace iotest::pipeline {
namespace {

// Send buffers for one subgrid part: one contribution per facet.
struct SendSlot {
  // kReceiving: the model's contributions coming in (--direction=both).
  enum class State { kFree, kReceiving, kGridding, kReady, kSending } state = State::kFree;
  AlignedBuffer contributions;
  std::vector<MPI_Request> requests;
  index_t part = -1;
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
  std::unique_ptr<storage::ChunkGatherer> gatherer;  // with input files
  degrid::DirtyPixels dirty;
  index_t visibilities = 0, w_planes = 0, subgrids = 0;
  double busy_s = 0, input_s = 0, check_s = 0;
  index_t values_checked = 0, values_wrong = 0;  // storage only
  GridThread(const swiftly::Recombination& rec, const std::vector<sky::PointSource>& pixels)
      : tower(rec.params()), sum(rec.make_subgrid_sum()), dirty(pixels) {}
};

}  // namespace

RankResult run_image_streamer(Context& ctx) {
  RankResult out;
  auto& st = out.stats;
  const auto& p = ctx.job.p;
  const auto& rec = *ctx.rec;
  const auto& o = ctx.options;
  const bool synthetic = o.synthetic_vis;  // storage only: no degridder
  const degrid::Degridder* degridder_or_null = ctx.degridder.get();
  const auto& obs = *ctx.job.obs;
  const int threads = ctx.threads, me = ctx.roles.streamer_index();
  const index_t F = p.facet_count(), values = p.m * p.m;
  const bool dynamic = ctx.roles.assigner_rank >= 0;
  const bool check = !ctx.pixels.empty();
  const bool both = ctx.both();
  GpuLane* gpu = ctx.gpu.get();  // --device=cuda: towers and taps on this GPU

  std::vector<const storage::Reader*> readers;
  for (const auto& f : ctx.inputs) readers.push_back(f.get());
  std::mutex read_lock;  // a Reader takes one thread at a time
  std::vector<GridThread> state;
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
    if (!readers.empty())
      ts.gatherer = std::make_unique<storage::ChunkGatherer>(readers, read_lock);
    if (both) {
      ts.model_tower.emplace(p);
      while (!gpu && static_cast<index_t>(ts.model_tower->planes.size()) < ctx.tower_planes)
        ts.model_tower->planes.emplace_back(p.xA, p.xA);
      ts.model_sum = rec.make_subgrid_sum();
      ts.model.assign(static_cast<size_t>(ctx.task_visibilities), cplx{});
      ts.model.clear();
    }
  }
  std::vector<SendSlot> slots(static_cast<size_t>(o.subgrid_queue));
  for (auto& s : slots) s.contributions = AlignedBuffer(synthetic ? 1 : F * values);
  std::mutex lock;                // guards gridded
  std::vector<size_t> gridded;    // slots whose contributions are extracted
  std::deque<size_t> send_order;  // slots taken, in walk order, not yet sending
  TaskQueue tasks;

  // Storage only: a part's chunks read in its tasks' order, the values
  // checked against the pattern.
  const auto read_part = [&](size_t slot_index, int thread) {
    auto& ts = state[static_cast<size_t>(thread)];
    const auto t0 = Clock::now();
    const auto& part = ctx.plan.parts[static_cast<size_t>(slots[slot_index].part)];
    const auto& visit = ctx.plan.visits[static_cast<size_t>(part.visit)];
    const binning::VisitRuns pieces(*ctx.binner, visit.stack, visit.subgrid, part.part,
                                    visit.parts);
    for (const auto& [first, last] : pieces.tasks(o.bls_per_task, degrid::kTaskVisibilities)) {
      pieces.runs(first, last, ts.runs);
      for (const auto& run : ts.runs) {
        const index_t row = index_t{run.baseline} * obs.time.steps + run.time;
        ts.vis.resize(static_cast<size_t>(run.count()));
        ts.gatherer->gather(row, run.chan_begin, run.count(), ts.vis.data());
        for (index_t x = 0; x < run.count(); ++x)
          ts.values_wrong += ts.vis[static_cast<size_t>(x)] !=
                             degrid::synthetic_visibility(run.baseline, run.time,
                                                          run.chan_begin + x, ctx.input_nonce);
        ts.values_checked += run.count();
        ts.visibilities += run.count();
      }
      ts.gatherer->clear();
    }
    ++ts.subgrids;
    ts.busy_s += seconds_since(t0);
    const std::lock_guard<std::mutex> hold(lock);
    gridded.push_back(slot_index);
  };

  // One part, as a task: its visibilities onto this thread's tower (one
  // thread per tower: the part's tasks add to the same planes), the tower
  // collapsed into the subgrid's sum, each facet's contribution extracted.
  // Both: the model's tower first, and the residual gridded.
  const auto grid_part = [&](size_t slot_index, int thread) {
    const auto& degridder = *degridder_or_null;
    auto& ts = state[static_cast<size_t>(thread)];
    const auto t0 = Clock::now();
    double input_s = 0, check_s = 0;
    const double read0 = ts.gatherer ? ts.gatherer->tally().seconds : 0;
    SendSlot& slot = slots[slot_index];
    const auto& part = ctx.plan.parts[static_cast<size_t>(slot.part)];
    const auto& visit = ctx.plan.visits[static_cast<size_t>(part.visit)];
    const index_t off0 = ctx.subgrid_tile0(visit.subgrid).offset;
    const index_t off1 = ctx.subgrid_tile1(visit.subgrid).offset;
    const binning::VisitRuns pieces(*ctx.binner, visit.stack, visit.subgrid, part.part,
                                    visit.parts);
    auto sum = ts.sum.view();
    std::fill(sum.data, sum.data + p.xM * p.xM, cplx{});
    double degrid_s = 0;
    if (both) {  // the model subgrid, from the producers' contributions
      const auto td = Clock::now();
      auto model = ts.model_sum.view();
      std::fill(model.data, model.data + p.xM * p.xM, cplx{});
      for (index_t f = 0; f < F; ++f)
        rec.add_contribution(CView2D(slot.contributions.data() + f * values, p.m, p.m),
                             ctx.facet_tile0(f).offset, ctx.facet_tile1(f).offset, model);
      degrid_s += seconds_since(td);
    }
    double w_lo = 0, w_hi = 0;
    if (pieces.w_range(w_lo, w_hi)) {  // a part may hold no visibilities: it sends zeros
      const double wc_lo = w_lo / degridder.planes().dw, wc_hi = w_hi / degridder.planes().dw;
      // The GPU builds a tower per task (both ways), the CPU one per part.
      const index_t gpu_planes =
          degrid::tower_planes(ctx.job.w, ctx.job.kernel.w_support, wc_lo, wc_hi).count;
      if (both && !gpu) {
        const auto td = Clock::now();
        ts.w_planes += degridder.build_tower(ts.model_sum.view(), wc_lo, wc_hi, *ts.model_tower);
        degrid_s += seconds_since(td);
      }
      if (!gpu) ts.w_planes += degridder.begin_tower(wc_lo, wc_hi, ts.tower);
      for (const auto& [first, last] : pieces.tasks(o.bls_per_task, degrid::kTaskVisibilities)) {
        pieces.runs(first, last, ts.runs);
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
          input_s += seconds_since(ti);
        }
        if (both) {  // the residual: observed minus the model's visibilities
          const auto td = Clock::now();
          if (gpu) {
            gpu->degrid(begin, end, off0, off1, w_lo, w_hi, ts.model_sum.data(), ts.model);
            ts.w_planes += gpu_planes;
          } else {
            ts.model.clear();
            degridder.degrid(begin, end, off0, off1, *ts.model_tower, ts.model);
          }
          for (index_t x = 0; x < n; ++x) {
            cplx& v = ts.vis[static_cast<size_t>(x)];
            ts.observed2 += std::norm(v);
            v -= ts.model[static_cast<size_t>(x)];
            ts.residual2 += std::norm(v);
          }
          degrid_s += seconds_since(td);
        }
        if (gpu) {
          gpu->grid(begin, end, off0, off1, w_lo, w_hi, ts.vis.data(), sum.data);
          ts.w_planes += gpu_planes;
        } else {
          degridder.grid(begin, end, off0, off1, ts.vis.data(), ts.tower);
        }
        ts.visibilities += n;
        if (check) {  // untimed: the same visibilities into the sampled pixels
          const auto tc = Clock::now();
          ts.dirty.add(degridder, begin, end, ts.vis.data());
          check_s += seconds_since(tc);
        }
      }
      if (!gpu) degridder.collapse_tower(ts.tower, sum);
    }
    for (index_t f = 0; f < F; ++f)
      rec.extract_from_subgrid(sum, ctx.facet_tile0(f).offset, ctx.facet_tile1(f).offset,
                               MView2D(slot.contributions.data() + f * values, p.m, p.m));
    ++ts.subgrids;
    ts.degrid_s += degrid_s;
    ts.input_s += input_s;
    ts.check_s += check_s;
    const double busy = seconds_since(t0) - input_s - check_s;
    ts.busy_s += busy;
    ts.grid_s += busy - degrid_s - (ts.gatherer ? ts.gatherer->tally().seconds - read0 : 0);
    const std::lock_guard<std::mutex> hold(lock);
    gridded.push_back(slot_index);
  };

  std::deque<index_t> todo;  // my parts, in walk order, not yet started
  bool more_coming = dynamic;
  if (!dynamic)
    for (size_t i = 0; i < ctx.plan.parts.size(); ++i)
      if (ctx.plan.parts[i].streamer == me) todo.push_back(static_cast<index_t>(i));
  const auto request = [&](std::int64_t n) {
    if (more_coming && n != 0) {
      MPI_Send(&n, 1, MPI_INT64_T, ctx.roles.assigner_rank, kTagRequest, ctx.control);
      ++st.messages_sent;
    }
  };
  Progress progress(o.progress && ctx.roles.rank == 0,
                    dynamic ? 0 : static_cast<index_t>(todo.size()), "subgrids");
  index_t sent_parts = 0;

  ExceptionCollector failures;
  double idle_s = 0, wait_s = 0;
  const auto t_start = Clock::now();
  request(o.subgrid_queue);

#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    if (thread != 0) {
      tasks.serve(thread);
    } else {
      failures.capture([&] {
        Backoff backoff;
        while (!tasks.failed) {
          bool progressed = false;
          // Grants from the assigner.
          if (more_coming) {
            int flag = 0;
            MPI_Status status;
            MPI_Iprobe(ctx.roles.assigner_rank, kTagGrant, ctx.control, &flag, &status);
            if (flag) {
              int count = 0;
              MPI_Get_count(&status, MPI_INT64_T, &count);
              std::vector<std::int64_t> granted(static_cast<size_t>(count));
              MPI_Recv(granted.data(), count, MPI_INT64_T, status.MPI_SOURCE, kTagGrant,
                       ctx.control, MPI_STATUS_IGNORE);
              ++st.messages_received;
              if (granted.empty()) {
                request(-1);
                more_coming = false;
              }
              for (const auto part : granted) todo.push_back(part);
              progressed = true;
            }
          }
          // The next parts, into free slots, in walk order.
          for (size_t i = 0; i < slots.size() && !todo.empty(); ++i) {
            SendSlot& s = slots[i];
            if (s.state != SendSlot::State::kFree) continue;
            s.part = todo.front();
            todo.pop_front();
            send_order.push_back(i);
            progressed = true;
            if (both) {  // the model's contributions first
              s.state = SendSlot::State::kReceiving;
              s.requests.resize(static_cast<size_t>(F));
              for (index_t f = 0; f < F; ++f)
                MPI_Irecv(s.contributions.data() + f * values, static_cast<int>(values),
                          MPI_C_DOUBLE_COMPLEX, ctx.roles.facet_owner(f), static_cast<int>(f),
                          ctx.data, &s.requests[static_cast<size_t>(f)]);
              continue;
            }
            s.state = SendSlot::State::kGridding;
            if (synthetic)
              tasks.push([&, i](int t) { read_part(i, t); });
            else
              tasks.push([&, i](int t) { grid_part(i, t); });
          }
          // Slots whose model is in: their parts' tasks.
          for (size_t i = 0; i < slots.size(); ++i) {
            SendSlot& s = slots[i];
            if (s.state != SendSlot::State::kReceiving) continue;
            int done = 0;
            MPI_Testall(static_cast<int>(F), s.requests.data(), &done, MPI_STATUSES_IGNORE);
            if (!done) continue;
            st.messages_received += F;
            st.bytes_received += F * values * static_cast<index_t>(sizeof(cplx));
            s.state = SendSlot::State::kGridding;
            tasks.push([&, i](int t) { grid_part(i, t); });
            progressed = true;
          }
          {
            std::vector<size_t> done;
            {
              const std::lock_guard<std::mutex> hold(lock);
              done.swap(gridded);
            }
            // Storage only: nothing to send, the slot is free at once.
            for (const size_t i : done) {
              slots[i].state = synthetic ? SendSlot::State::kFree : SendSlot::State::kReady;
              if (synthetic) {
                std::erase(send_order, i);
                request(1);
                progress.update(++sent_parts);
              }
            }
            progressed = progressed || !done.empty();
          }
          // Sends, in walk order: the producers' receives match them so.
          while (!send_order.empty() &&
                 slots[send_order.front()].state == SendSlot::State::kReady) {
            SendSlot& s = slots[send_order.front()];
            send_order.pop_front();
            s.requests.resize(static_cast<size_t>(F));
            for (index_t f = 0; f < F; ++f)
              MPI_Isend(s.contributions.data() + f * values, static_cast<int>(values),
                        MPI_C_DOUBLE_COMPLEX, ctx.roles.facet_owner(f), static_cast<int>(f),
                        ctx.data, &s.requests[static_cast<size_t>(f)]);
            st.messages_sent += F;
            st.bytes_sent += F * values * static_cast<index_t>(sizeof(cplx));
            s.state = SendSlot::State::kSending;
            progressed = true;
          }
          // Completed sends free their slots.
          index_t held = 0, freed = 0;
          for (auto& s : slots) {
            if (s.state == SendSlot::State::kSending) {
              int done = 0;
              MPI_Testall(static_cast<int>(F), s.requests.data(), &done, MPI_STATUSES_IGNORE);
              if (done) {
                s.state = SendSlot::State::kFree;
                ++freed;
              }
            }
            if (s.state != SendSlot::State::kFree) ++held;
          }
          st.subgrid_queue_max = std::max(st.subgrid_queue_max, held);
          if (freed > 0) {
            request(freed);
            sent_parts += freed;
            progress.update(sent_parts);
            progressed = true;
          }
          if (!more_coming && todo.empty() && held == 0) break;
          if (progressed) {
            backoff.reset();
          } else if (!tasks.try_run(thread)) {
            // Nothing to do: waiting on producers while sends (or the
            // model's receives) are posted, else on the gridding threads.
            const bool sending = std::any_of(slots.begin(), slots.end(), [](const SendSlot& s) {
              return s.state == SendSlot::State::kSending || s.state == SendSlot::State::kReceiving;
            });
            backoff.pause(sending ? wait_s : idle_s);
          }
        }
      });
      tasks.close();
    }
  }
  failures.rethrow();
  tasks.failures.rethrow();
  progress.finish();
  st.task_queue_max = tasks.high_water();
  const double total = seconds_since(t_start);
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
  // over the whole observation's weights, so the streamers' shares add up.
  const double scale = degrid::dirty_image_scale(ctx.job.obs->visibility_count());
  for (auto& sum : out.dirty_sums) sum *= scale;
  out.input_s = input_s;
  out.check_s = check_s;
  if (gpu) out.gpu = gpu->timing();
  st.wait_s = wait_s;
  st.idle_s = idle_s;
  // Predicting visibilities in memory and the checks ran inside tasks: the
  // slowest thread's share of them is not the pipeline's work.
  st.busy_s = std::max(0.0, total - wait_s - idle_s - input_s - check_s);
  return out;
}

}  // namespace iotest::pipeline
