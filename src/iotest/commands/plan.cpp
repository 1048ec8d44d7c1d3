#include "iotest/commands/plan.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "iotest/binning/binning.hpp"
#include "iotest/commands/layout.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/degridder.hpp"

namespace iotest::commands {

void add_observation(report::Report& r, const telescope::Observation& obs,
                     const binning::GridGeometry& g, const binning::Distribution& d) {
  r.counts.baselines = obs.baseline_count();
  r.counts.visibilities = obs.visibility_count();
  r.counts.subgrids_used = d.subgrids_used;
  report::Observation o = summarise(obs);
  o.max_uv = g.max_uv;
  o.pixel_lm = g.pixel_lm;
  o.cell_uv = g.cell_uv;
  o.field_lm = g.field_lm;
  o.vis_per_subgrid_min = d.min;
  o.vis_per_subgrid_mean = d.mean;
  o.vis_per_subgrid_max = d.max;
  r.observation = o;
}

void require_source_count(const config::RecombinationParams& p, index_t source_count) {
  const index_t most = p.used_size * p.used_size / 2;
  if (source_count < 1 || source_count > most)
    throw UsageError("--source-count",
                     fmt::format("expected 1..{} sources, got {}", most, source_count));
}

void require_memory(const config::RecombinationParams& p, index_t bytes) {
  const index_t available = available_memory_bytes();
  const auto gib = [](index_t b) { return static_cast<double>(b) / (1024.0 * 1024 * 1024); };
  if (available > 0 && bytes > available)
    throw UsageError("--rec-set",
                     fmt::format("{} needs about {:.1f} GiB of memory in one process (the image "
                                 "alone is {:.1f} GiB), but this machine has {:.1f} GiB available",
                                 p.canonical, gib(bytes), gib(p.image_bytes()), gib(available)));
}

report::Memory estimate_memory(const config::RecombinationParams& p, int threads) {
  constexpr index_t c = sizeof(cplx);
  const index_t nf2 = p.facet_count(), t = threads;
  report::Memory m;
  m.image_bytes = p.image_bytes();
  m.facet_bytes = p.yB * p.yB * c;
  m.prepared_facet_bytes = p.yN * p.yB * c;
  m.contribution_bytes = p.m * p.m * c;
  m.subgrid_bytes = p.xM * p.xM * c;
  const index_t column_bytes = p.m * p.yN * c;
  const index_t column_workspace = p.m * p.yB * c + column_bytes;
  // A facet worker: its prepared facet, one column buffer and workspace per
  // thread, and its queue of contributions in flight.
  m.producer_bytes = m.prepared_facet_bytes + t * (column_bytes + column_workspace) +
                     t * kDefaultSendQueue * m.contribution_bytes;
  // A streamer: its receive slots, each a padded subgrid plus one
  // contribution per facet.
  m.streamer_bytes = kDefaultSubgridQueue * (m.subgrid_bytes + nf2 * m.contribution_bytes);
  // One process doing both roles for all facets (`iotest recombine`).
  m.single_process_bytes =
      nf2 * (m.prepared_facet_bytes + column_bytes) +
      t * (column_workspace + m.contribution_bytes + m.subgrid_bytes + m.facet_bytes) +
      p.subgrids_per_axis * (p.xA * p.xA * c + m.subgrid_bytes) + p.N * c;
  return m;
}

report::Report plan(const PlanOptions& o) {
  const index_t nodes = o.nodes;
  if (nodes < 1) throw UsageError("--nodes", "expected a node count >= 1");
  report::Report r;
  r.mode = "plan";
  r.rec = config::resolve_rec_set(o.rec_set, {o.window_width, 0});
  std::optional<telescope::Observation> obs;
  std::optional<binning::GridGeometry> g;
  if (o.observation) {
    // With visibilities the subgrids keep the margin degridding needs
    // (default kernels and w layout, as `iotest degrid` uses them), so the
    // counts below are those of the real job.
    obs = telescope::make_observation(*o.observation);
    g = binning::grid_geometry(r.rec, *obs);
    const auto w = degrid::w_layout(*g, *obs, r.rec.xA, degrid::DegridOptions{}, std::nullopt);
    r.rec = config::resolve_rec_set(o.rec_set, {o.window_width, w.margin});
  }
  r.counts.facets = r.rec.facet_count();
  r.counts.subgrids = r.rec.subgrid_count();
  r.memory = estimate_memory(r.rec, 1);
  report::Advice advice;
  advice.nodes = nodes;
  advice.streamers = nodes;
  advice.recommended_ranks = r.counts.facets + advice.streamers + 1;
  advice.rule =
      "one facet worker per facet + one streamer per node (one NUMA domain assumed) + 1 assigner";
  r.advice = advice;
  if (obs) add_observation(r, *obs, *g, binning::distribution(r.rec, *obs, *g));
  return r;
}

}  // namespace iotest::commands
