// GpuDegridder's work in batches, for the one-process commands (degrid,
// grid) that run --device=cuda.
#pragma once

#include <utility>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/device/gpu_degridder.hpp"
#include "iotest/swiftly/core.hpp"

namespace iotest::commands::detail {

// The host side of the GPU path of `iotest degrid` and `iotest grid`: a
// group of a column's visits, each its subgrid's image-space sum and its
// runs cut into the CPU path's tasks (each task a GpuVisit with its
// visit's sum and w range), and the tasks in batches for GpuDegridder.
struct GpuGroup {
  struct Visit {
    Array2D sum;
    std::vector<binning::VisRun> runs;
    std::vector<std::pair<size_t, size_t>> tasks;  // runs [first, last) of each task
    double wc_min = 0, wc_max = 0;                 // w / dw from the stack
    index_t subgrid = 0, off0 = 0, off1 = 0;
    explicit Visit(const swiftly::Recombination& rec) : sum(rec.make_subgrid_sum()) {}
    void take(const binning::Binner& binner, index_t stack, index_t s, index_t o0, index_t o1,
              index_t bls_per_task, double dw) {
      const binning::VisitRuns visit(binner, stack, s);
      double lo = 0, hi = 0;
      visit.w_range(lo, hi);
      wc_min = lo / dw;
      wc_max = hi / dw;
      subgrid = s, off0 = o0, off1 = o1;
      runs.clear();
      tasks.clear();
      std::vector<binning::VisRun> part;
      for (const auto& [first, last] : visit.tasks(bls_per_task, degrid::kTaskVisibilities)) {
        visit.runs(first, last, part);
        tasks.emplace_back(runs.size(), runs.size() + part.size());
        runs.insert(runs.end(), part.begin(), part.end());
      }
    }
  };
  std::vector<Visit> visits;  // grown, never shrunk: the sums are reused
  size_t used = 0;
  std::vector<cplx> out;  // a batch's visibilities, task after task
  void resize(const swiftly::Recombination& rec, size_t n) {
    while (visits.size() < n) visits.emplace_back(rec);
    used = n;
  }

  struct Batch {
    std::vector<device::GpuVisit> visits;  // one per task
    std::vector<cplx*> sums;               // each task's visit's sum
    std::vector<const cplx*> const_sums() const { return {sums.begin(), sums.end()}; }
    std::vector<index_t> first;  // each task's first value in `out`
    std::vector<index_t> subgrid;
    index_t visibilities = 0;  // all its tasks'
  };
  // The group's tasks, in batches of at most max_visibilities (a larger
  // task alone).
  std::vector<Batch> batches(index_t max_visibilities) {
    std::vector<Batch> all(1);
    index_t held = 0;
    for (size_t k = 0; k < used; ++k) {
      auto& v = visits[k];
      for (const auto& [a, b] : v.tasks) {
        const device::GpuVisit task{v.wc_min,          v.wc_max, v.runs.data() + a,
                                    v.runs.data() + b, v.off0,   v.off1};
        const index_t n = task.visibilities();
        if (n == 0) continue;
        if (held > 0 && held + n > max_visibilities) {
          all.emplace_back();
          held = 0;
        }
        auto& batch = all.back();
        batch.first.push_back(held);
        batch.visits.push_back(task);
        batch.sums.push_back(v.sum.data());
        batch.subgrid.push_back(v.subgrid);
        held += n;
        batch.visibilities = held;
      }
    }
    return all;
  }
};

}  // namespace iotest::commands::detail
