// The steps `iotest degrid` and `iotest grid` share. Both walk the chain
// in one process, the one from the facets to the visibilities, the other
// back: the w-stacks that hold visibilities, column by column of their
// subgrids, each subgrid's w-tower on one thread. They count the visits
// and check the memory alike, and report the walk alike.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/commands/facets.hpp"
#include "iotest/commands/gpu_group.hpp"
#include "iotest/common/parallel.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/device/device.hpp"
#include "iotest/device/gpu_degridder.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/report/report.hpp"
#include "iotest/swiftly/core.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::commands::detail {

// How the process walks: what its memory and its GPU batches depend on.
struct ChainShape {
  int threads = 1;
  index_t bls_per_task = 1;
  device::Kind device = device::Kind::cpu;
  bool cuda() const { return device == device::Kind::cuda; }
};

// The binner, with the final w-stacking step, and what it counted: the
// visibilities of every visit.
struct Visits {
  std::optional<binning::Binner> binner;
  binning::VisitCounts counts;
};

// The visits counted, and the memory they take checked against this
// machine's (and the GPU's) before the large allocations. `held`: what
// the command holds besides the chain (grid: the image).
inline report::Memory count_and_check(Visits& v, const job::Job& job, const ChainShape& shape,
                                      bool writes, index_t held,
                                      const std::vector<device::GpuInfo>& gpus) {
  const auto& obs = *job.obs;
  v.binner.emplace(job.p, obs, *job.geometry, job.split());
  v.counts = v.binner->count_visits(0, obs.baseline_count(), shape.threads);
  job::RunShape run;
  run.threads = shape.threads;
  run.bls_per_task = shape.bls_per_task;
  run.device = shape.device;
  auto memory = job::estimate_memory(job, run, &v.counts);
  memory.single_process_bytes =
      job::estimate_single_process(job, shape.threads, &v.counts, writes) + held;
  if (shape.cuda())
    memory.single_process_bytes += job::gpu_host_bytes(job, v.counts, shape.bls_per_task);
  job::require_memory(job.p, memory.single_process_bytes);
  if (shape.cuda()) job::require_gpu_memory(memory.streamer_gpu_bytes, 1, gpus);
  return memory;
}

// Where the facets and the subgrids lie: subgrid s at tiles (s / ns,
// s % ns) of the subgrids' axis.
struct Tiling {
  FacetTiles facets;
  std::vector<swiftly::Tile> subgrids;
  index_t ns = 0;
  explicit Tiling(const config::RecombinationParams& p)
      : facets(p), subgrids(swiftly::subgrid_tiles(p)), ns(p.subgrids_per_axis) {}
  const swiftly::Tile& facet0(index_t f) const { return facets.t0(f); }
  const swiftly::Tile& facet1(index_t f) const { return facets.t1(f); }
  // A column's offset on the first axis, from its tile index.
  index_t column_offset(index_t i0) const { return subgrids[static_cast<size_t>(i0)].offset; }
  // A subgrid's offset on the second axis.
  index_t subgrid_offset1(index_t s) const { return subgrids[static_cast<size_t>(s % ns)].offset; }
};

// A w-stack's subgrids that hold visibilities, by column: the column's
// tile index on the first axis -> its subgrids.
using Columns = std::map<index_t, std::vector<index_t>>;

struct Walked {
  index_t stacks = 0, columns = 0;
};

// Calls step(stack, columns) for every w-stack that holds visibilities,
// in order; stacks without any are skipped, not walked.
template <class Step>
Walked walk_stacks(const binning::VisitCounts& counts, const config::RecombinationParams& p,
                   Step&& step) {
  Walked walked;
  const index_t ns = p.subgrids_per_axis;
  for (index_t si = 0; si < counts.stacks; ++si) {
    const index_t stack = counts.first_stack + si;
    Columns columns;
    for (index_t s = 0; s < p.subgrid_count(); ++s)
      if (counts.visibilities[static_cast<size_t>(counts.at(stack, s))] > 0)
        columns[s / ns].push_back(s);
    if (columns.empty()) continue;
    ++walked.stacks;
    walked.columns += static_cast<index_t>(columns.size());
    step(stack, columns);
  }
  return walked;
}

// A thread's figures of the walk, and added up, all threads'. The checks
// ran on the threads inside the timed walk: the slowest thread's share is
// what to take off its time.
struct WalkFigures {
  index_t planes = 0, visibilities = 0;
  double check_s = 0;
  void add(const WalkFigures& t) {
    planes += t.planes;
    visibilities += t.visibilities;
    check_s = std::max(check_s, t.check_s);
  }
  // A GPU task's, counted on the host as the CPU path counts its own.
  void add_task(const job::Job& job, const device::GpuVisit& task) {
    visibilities += task.visibilities();
    planes += degrid::tower_planes(job.w, job.kernel.w_support, task.wc_min, task.wc_max).count;
  }
};

// Every visibility the binning makes once (every row's, less the
// autocorrelations where the image leaves them out), or the walk is wrong.
inline void require_every_visibility(const char* done, index_t visibilities,
                                     const binning::Binner& binner) {
  if (visibilities != binner.visibility_count())
    throw std::logic_error(
        fmt::format("{} {} visibilities of {}", done, visibilities, binner.visibility_count()));
}

// What the walk holds whichever its direction. The GPU, with
// --device=cuda, is the first (one process: docs/gpu.md).
struct Chain {
  const job::Job& job;
  ChainShape shape;
  const binning::Binner& binner;
  const binning::VisitCounts& counts;
  const swiftly::Recombination& rec;
  const degrid::Degridder& degridder;
  Tiling tiling;
  std::optional<device::GpuDegridder> gpu;
  GpuGroup gpu_group;
  ExceptionCollector failures;  // errors inside the parallel work, rethrown after it

  Chain(const job::Job& j, const ChainShape& s, const Visits& v, const swiftly::Recombination& r,
        const degrid::Degridder& d)
      : job(j), shape(s), binner(*v.binner), counts(v.counts), rec(r), degridder(d), tiling(j.p) {}
  void start_gpu(const std::vector<device::GpuInfo>& gpus) {
    if (shape.cuda()) gpu.emplace(degridder, gpus.front().index);
  }
  index_t facet_count() const { return job.p.facet_count(); }
  double dw() const { return degridder.planes().dw; }

  // The GPU path's group of a column's subgrids, on the CPU threads: each
  // subgrid's sum zeroed and given `sum(off1, sum)` (degrid: the facets'
  // contributions), its visit cut into the CPU path's tasks, each with its
  // visit's sum and w range.
  template <class Sum>
  void take_group(index_t stack, index_t off0, const index_t* subgrids, size_t n, Sum&& sum) {
    gpu_group.resize(rec, n);
#pragma omp parallel for schedule(dynamic) num_threads(shape.threads)
    for (size_t k = 0; k < n; ++k)
      failures.capture([&] {
        auto& v = gpu_group.visits[k];
        const index_t s = subgrids[k];
        const index_t off1 = tiling.subgrid_offset1(s);
        std::fill(v.sum.data(), v.sum.data() + v.sum.size(), cplx{});
        sum(off1, v.sum.view());
        v.take(binner, stack, s, off0, off1, shape.bls_per_task, dw());
      });
    failures.rethrow();
  }
};

// What every walk reports: its settings, the device, the counts, the
// observation and the sky. `calibration`: the tower height measured
// (--target-err).
struct WalkSettings {
  index_t source_count = 0;
  std::uint64_t seed = 0;
  const char* direction = "";
  std::optional<degrid::TowerCalibration> calibration;
};
inline void describe_walk(report::Report& r, const Chain& c, const WalkSettings& w,
                          const Walked& walked, const binning::Distribution& distribution,
                          const std::vector<device::GpuInfo>& gpus) {
  r.settings = report::RunSettings{};
  r.settings->source_count = w.source_count;
  r.settings->seed = w.seed;
  r.settings->direction = w.direction;
  r.settings->subgrids = distribution.subgrids_used;
  r.settings->threads = c.shape.threads;
  job::describe_degridding(*r.settings, c.job, c.degridder, walked.stacks, w.calibration);
  r.device = job::device_section(c.shape.device, gpus);
  if (c.gpu) {
    r.device->kernel_s = c.gpu->timing().kernel_s;
    r.device->transfer_s = c.gpu->timing().transfer_s;
    r.device->host_wait_s = c.gpu->timing().host_wait_s;
  }
  r.counts.facets = c.facet_count();
  r.counts.subgrids = c.job.p.subgrid_count();
  r.counts.subgrids_processed = distribution.subgrids_used;
  r.counts.subgrid_columns = walked.columns;
  job::add_observation(r, *c.job.obs, *c.job.geometry, distribution);
  r.sky = job::sky_of(c.job.sources, c.job.geometry->pixel_lm);
}

// The walk's rates over its timed seconds.
inline report::Rates walk_rates(const WalkFigures& f, double seconds, int threads) {
  report::Rates rates;
  rates.vis_per_s = static_cast<double>(f.visibilities) / seconds;
  rates.vis_per_s_per_thread = rates.vis_per_s / threads;
  rates.w_planes_per_s = static_cast<double>(f.planes) / seconds;
  return rates;
}

}  // namespace iotest::commands::detail
