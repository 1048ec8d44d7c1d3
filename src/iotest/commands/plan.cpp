#include "iotest/commands/plan.hpp"

#include <omp.h>

#include "iotest/common/errors.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"

namespace iotest::commands {

report::Report plan(const PlanOptions& o) {
  const index_t nodes = o.nodes;
  if (nodes < 1) throw UsageError("--nodes", "expected a node count >= 1");
  // With visibilities the subgrids keep the margin degridding needs
  // (default kernels and w layout), so the counts are those of the real job.
  job::JobOptions jo;
  jo.rec_set = o.rec_set;
  jo.window_width = o.window_width;
  jo.observation = o.observation;
  jo.source_count = 0;
  const auto job = job::resolve(jo);
  report::Report r;
  r.mode = "plan";
  r.rec = job.p;
  r.counts.facets = r.rec.facet_count();
  r.counts.subgrids = r.rec.subgrid_count();
  report::Advice advice;
  advice.nodes = nodes;
  advice.streamers = nodes;
  advice.recommended_ranks = r.counts.facets + advice.streamers + 1;
  advice.rule =
      "one facet worker per facet + one streamer per node (one NUMA domain assumed) + 1 assigner";
  r.advice = advice;
  job::RunShape shape;
  shape.producers = static_cast<int>(r.counts.facets);
  shape.streamers = static_cast<int>(nodes);
  shape.assigner = true;
  std::optional<binning::VisitCounts> counts;
  if (job.obs) {
    const binning::Binner binner(job.p, *job.obs, *job.geometry, job.split());
    counts = binner.count_visits(0, job.obs->baseline_count(), omp_get_max_threads());
    job::add_observation(r, *job.obs, *job.geometry, binning::summarise(*counts));
  }
  r.memory = job::estimate_memory(job, shape, counts ? &*counts : nullptr);
  return r;
}

}  // namespace iotest::commands
