#include "iotest/report/report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

#include "iotest/common/errors.hpp"

namespace iotest::report {

std::string Advice::NodeGroup::nodes_text() const {
  return node_count == 1 ? fmt::format("node {}", first_node)
                         : fmt::format("nodes {}-{}", first_node, first_node + node_count - 1);
}

namespace {

using nlohmann::json;

json number_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

json config_json(const config::RecombinationParams& p) {
  return {{"rec_set", p.name},
          {"canonical", p.canonical},
          {"N", p.N},
          {"yB", p.yB},
          {"yN", p.yN},
          {"xA", p.xA},
          {"xM", p.xM},
          {"W", p.W},
          {"f", p.f},
          {"m", p.m},
          {"used_size", p.used_size},
          {"facets_per_axis", p.facets_per_axis},
          {"facet_step", p.facet_step},
          {"subgrids_per_axis", p.subgrids_per_axis},
          {"subgrid_step", p.subgrid_step},
          {"facet_granularity", p.facet_granularity},
          {"subgrid_granularity", p.subgrid_granularity},
          {"margin", p.margin},
          {"wire_efficiency", p.wire_efficiency_per_axis() * p.wire_efficiency_per_axis()}};
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

std::string error_text(double v) {
  return std::isfinite(v) ? fmt::format("{:.2e}", v) : "-";
}

std::string bytes_text(index_t b) {
  return bytes_text(static_cast<double>(b));
}

// "2 producers + 1 streamer": the ranks of one node, by role.
std::string ranks_text(const Advice::NodeGroup& g) {
  std::string s;
  for (const auto& [count, role] : {std::pair{g.producers, "producer"},
                                    {g.streamers, "streamer"},
                                    {g.writers, "writer rank"},
                                    {g.assigners, "assigner"}})
    if (count > 0)
      s += fmt::format("{}{} {}{}", s.empty() ? "" : " + ", count, role, count > 1 ? "s" : "");
  return s;
}

std::string advice_text(const Advice& a, const std::optional<Observation>& observation) {
  std::string s = fmt::format(
      "  ranks: {} on {} node(s), {} per node: {} producer(s) x {} thread(s), {} streamer(s) x {} "
      "thread(s), {}{}\n",
      a.recommended_ranks, a.nodes, a.ranks_per_node, a.producers, a.producer_threads, a.streamers,
      a.threads, a.writer_ranks > 0 ? fmt::format("{} writer rank(s), ", a.writer_ranks) : "",
      a.assigner ? "1 assigner" : "static assignment");
  s += fmt::format("  run: mpirun -np {} --map-by slot iotest --facet-workers={}{}{} ...\n",
                   a.recommended_ranks, a.producers,
                   a.writer_ranks > 0 ? fmt::format(" --writer-ranks={}", a.writer_ranks) : "",
                   a.assigner ? " --assigner" : "");
  if (a.suggested_writer_ranks)
    s += fmt::format(
        "  in transit: at the rates {} measured, {} writer rank(s) would keep pace with {} "
        "streamer(s) (--writer-ranks)\n",
        a.rates_from, *a.suggested_writer_ranks, a.streamers);
  s += fmt::format("  rule: {}\n", a.rule);
  s += fmt::format("  per node, of {} ({}):\n", bytes_text(a.node_memory_bytes),
                   a.node_memory_source);
  for (const auto& g : a.layout) {
    s += fmt::format("    {:<14} {:<44} {:>10}{}\n", g.nodes_text(), ranks_text(g),
                     bytes_text(g.bytes), g.fits ? "" : "  DOES NOT FIT");
  }
  if (observation && a.streamers > 0)
    s += fmt::format("  to write: {} in all, about {} per streamer\n",
                     bytes_text(observation->visibility_bytes),
                     bytes_text(observation->visibility_bytes / a.streamers));
  for (const auto& w : a.warnings) s += "  warning: " + w + "\n";
  return s;
}

}  // namespace

namespace {
json stages_json(const StageSeconds& k) {
  return {{"facet_s", k.facet_s},
          {"column_s", k.column_s},
          {"contribution_s", k.contribution_s},
          {"assembly_s", k.assembly_s},
          {"pieces_s", k.pieces_s},
          {"tower_s", k.tower_s},
          {"degrid_task_s", k.degrid_task_s}};
}
}  // namespace

json to_json(const Report& r) {
  json j;
  j["mode"] = r.mode;
  // Layout and verify reports carry no recombination: no parameters, counts
  // or memory of one.
  const bool recombination = r.rec.N > 0;
  j["config"] = recombination ? config_json(r.rec) : json::object();
  if (r.settings) {
    const auto& s = *r.settings;
    j["config"]["source_count"] = s.source_count;
    j["config"]["seed"] = s.seed;
    j["config"]["direction"] = s.direction;
    j["config"]["subgrids"] = s.subgrids;
    j["config"]["check"] = s.check;
    j["config"]["threads"] = s.threads;
    if (s.support > 0) {
      j["config"]["support"] = s.support;
      j["config"]["w_support"] = s.w_support;
      j["config"]["w_free"] = s.w_free;
      j["config"]["w_step"] = s.w_step;
      j["config"]["w_stack_step"] = s.w_stack_step;
      j["config"]["w_stacks"] = s.w_stacks;
      j["config"]["tower_half_height"] = s.tower_half_height;
      if (s.target_err > 0) {
        j["config"]["target_err"] = s.target_err;
        j["config"]["tower_error_at_zero"] = s.tower_error_at_zero;
      }
      j["config"]["vis_samples"] = s.vis_samples;
    }
    if (!s.backend.empty()) {  // with visibilities (degridded or synthetic)
      j["config"]["backend"] = s.backend;
      j["config"]["durability"] = s.durability;
      j["config"]["nonce"] = s.nonce;
      j["config"]["output"] = s.output;
    }
  }
  if (recombination)
    j["counts"] = {{"facets", r.counts.facets},
                   {"subgrids", r.counts.subgrids},
                   {"subgrids_processed", r.counts.subgrids_processed},
                   {"subgrid_columns", r.counts.subgrid_columns},
                   {"subgrids_checked", r.counts.subgrids_checked},
                   {"facets_checked", r.counts.facets_checked}};
  for (const auto& [key, value] : {std::pair{"baselines", r.counts.baselines},
                                   {"visibilities", r.counts.visibilities},
                                   {"subgrids_used", r.counts.subgrids_used},
                                   {"bytes_written", r.counts.bytes_written},
                                   {"chunks_written", r.counts.chunks_written},
                                   {"chunks_rewritten", r.counts.chunks_rewritten},
                                   {"visibilities_written", r.counts.visibilities_written},
                                   {"bytes_sent", r.counts.bytes_sent},
                                   {"bytes_received", r.counts.bytes_received}})
    if (value) j["counts"][key] = *value;
  if (r.observation) {
    const auto& o = *r.observation;
    j["config"]["vis_set"] = o.vis_set;
    j["config"]["time"] = o.time;
    j["config"]["freq"] = o.freq;
    j["config"]["dec"] = o.dec_deg;
    j["observation"] = {{"vis_set", o.vis_set},
                        {"description", o.description},
                        {"antennas", o.antennas},
                        {"autocorrelations", o.autocorrelations},
                        {"time_chunks", o.time_chunks},
                        {"freq_chunks", o.freq_chunks},
                        {"visibility_bytes", o.visibility_bytes}};
    if (o.cell_uv > 0) {  // with a recombination: the grid and the work per subgrid
      j["observation"]["grid"] = {{"max_uv_wavelengths", o.max_uv},
                                  {"pixel_lm", o.pixel_lm},
                                  {"cell_wavelengths", o.cell_uv},
                                  {"field_lm", o.field_lm}};
      j["observation"]["vis_per_subgrid"] = {{"min", o.vis_per_subgrid_min},
                                             {"mean", o.vis_per_subgrid_mean},
                                             {"max", o.vis_per_subgrid_max}};
    }
  }
  if (r.verification) {
    const auto& v = *r.verification;
    j["verification"] = {{"files", v.files},
                         {"chunks_expected", v.chunks_expected},
                         {"chunks_present", v.chunks_present},
                         {"tolerance", v.tolerance},
                         {"synthetic", v.synthetic},
                         {"stonewalled", v.stonewalled},
                         {"nonce", v.nonce},
                         {"all", v.all},
                         {"values_checked", v.values_checked},
                         {"values_wrong", v.values_wrong},
                         {"chunks_checksummed", v.chunks_checksummed},
                         {"checksums_wrong", v.checksums_wrong},
                         {"passed", v.passed},
                         {"reason", v.reason}};
    if (v.stonewalled) {
      j["verification"]["written_parts"] = v.written_parts;
      j["verification"]["visibilities_written"] = v.visibilities_written;
    }
  }
  if (r.sky) j["sky"] = {{"pixel_lm", r.sky->pixel_lm}, {"sources", r.sky->sources}};
  if (r.layout) {
    const auto& l = *r.layout;
    json uvw = json::array();
    for (const auto& u : l.uvw)
      uvw.push_back({{"baseline", u.baseline},
                     {"antenna1", u.antenna1},
                     {"antenna2", u.antenna2},
                     {"time", u.time},
                     {"hour_angle_s", u.hour_angle_s},
                     {"uvw_m", {u.u, u.v, u.w}}});
    j["layout"] = {
        {"vis_set", l.vis_set},
        {"centre", {{"lon_deg", l.lon_deg}, {"lat_deg", l.lat_deg}, {"height_m", l.height_m}}},
        {"max_baseline_m", l.max_baseline_m},
        {"antennas_enu_m", l.antennas_enu},
        {"uvw", uvw}};
  }
  if (r.accuracy) {
    const auto& a = *r.accuracy;
    j["accuracy"] = {{"definition", kAccuracyDefinition},
                     {"subgrid_rmse", number_or_null(a.subgrid_rmse)},
                     {"subgrid_rmse_max", number_or_null(a.subgrid_rmse_max)},
                     {"facet_rmse", number_or_null(a.facet_rmse)},
                     {"facet_rmse_max", number_or_null(a.facet_rmse_max)}};
    if (a.vis_samples) {
      j["accuracy"]["vis_rmse"] = number_or_null(a.vis_rmse);
      j["accuracy"]["vis_rmse_max"] = number_or_null(a.vis_rmse_max);
      j["accuracy"]["vis_samples"] = *a.vis_samples;
    }
    if (a.pixel_samples) j["accuracy"]["pixel_samples"] = *a.pixel_samples;
    if (!std::isnan(a.residual_rms)) j["accuracy"]["residual_rms"] = a.residual_rms;
  }
  if (r.timing) {
    const auto& t = *r.timing;
    j["timing"] = {
        {"wall_s", t.wall_s},     {"planning_s", t.planning_s}, {"predict_s", t.predict_s},
        {"image_s", t.image_s},   {"input_s", t.input_s},       {"check_s", t.check_s},
        {"degrid_s", t.degrid_s}, {"write_s", t.write_s},       {"sync_s", t.sync_s},
        {"open_s", t.open_s},     {"stream_s", t.stream_s}};
    if (t.stages) j["timing"]["stages"] = stages_json(*t.stages);
  }
  if (r.rates) {
    const auto& t = *r.rates;
    j["rates"] = {{"predict_subgrids_per_s", t.predict_subgrids_per_s},
                  {"image_subgrids_per_s", t.image_subgrids_per_s},
                  {"predict_gflops", t.predict_gflops},
                  {"image_gflops", t.image_gflops},
                  {"gflops", t.gflops},
                  {"vis_per_s", t.vis_per_s},
                  {"vis_per_s_per_thread", t.vis_per_s_per_thread},
                  {"w_planes_per_s", t.w_planes_per_s},
                  {"write_bytes_per_s", t.write_bytes_per_s},
                  {"raw_write_bytes_per_s", t.raw_write_bytes_per_s},
                  {"net_bytes_per_s", t.net_bytes_per_s},
                  {"subgrids_per_s", t.subgrids_per_s}};
  }
  const auto& m = r.memory;
  if (recombination)
    j["memory"] = {{"image_bytes", m.image_bytes},
                   {"facet_bytes", m.facet_bytes},
                   {"prepared_facet_bytes", m.prepared_facet_bytes},
                   {"contribution_bytes", m.contribution_bytes},
                   {"subgrid_bytes", m.subgrid_bytes},
                   {"producer_bytes", m.producer_bytes},
                   {"streamer_bytes", m.streamer_bytes},
                   {"single_process_bytes", m.single_process_bytes}};
  if (recombination && m.assigner_bytes > 0) j["memory"]["assigner_bytes"] = m.assigner_bytes;
  if (recombination && m.writer_bytes > 0) j["memory"]["writer_bytes"] = m.writer_bytes;
  if (recombination && !m.items.empty()) {
    json items = json::array();
    for (const auto& i : m.items)
      items.push_back({{"role", i.role}, {"name", i.name}, {"bytes", i.bytes}});
    j["memory"]["items"] = items;
  }
  if (m.peak_rss_bytes) j["memory"]["peak_rss_bytes"] = *m.peak_rss_bytes;
  if (r.reading) {
    const auto& d = *r.reading;
    json ranks = json::array();
    for (const auto& k : d.per_rank)
      ranks.push_back({{"rank", k.rank},
                       {"host", k.host},
                       {"files", k.files},
                       {"chunks", k.chunks},
                       {"bytes", k.bytes},
                       {"open_s", k.open_s},
                       {"read_s", k.read_s}});
    j["read"] = {{"files", d.files},
                 {"backend", d.backend},
                 {"ranks", d.ranks},
                 {"direct", d.direct},
                 {"caches_dropped", d.caches_dropped},
                 {"chunks", d.chunks},
                 {"chunks_stored", d.chunks_stored},
                 {"chunks_reread", d.chunks_reread},
                 {"bytes", d.bytes},
                 {"open_s", d.open_s},
                 {"read_s", d.read_s},
                 {"wall_s", d.wall_s},
                 {"bytes_per_s", d.bytes_per_s},
                 {"checked", d.checked},
                 {"values_checked", d.values_checked},
                 {"values_wrong", d.values_wrong},
                 {"values_right", d.values_right},
                 {"values_expected", d.values_expected},
                 {"passed", d.passed},
                 {"per_rank", ranks}};
    if (!d.first_wrong.empty()) j["read"]["first_wrong"] = d.first_wrong;
  }
  if (r.checkpoint) {
    const auto& c = *r.checkpoint;
    j["h5"] = {{"path", c.path},
               {"ranks", c.ranks},
               {"grid", c.grid},
               {"domain", c.domain},
               {"chunk", c.chunk},
               {"steps", c.steps},
               {"transfer", c.transfer},
               {"collective_metadata", c.collective_metadata},
               {"never_fill", c.never_fill},
               {"alloc", c.alloc},
               {"precreate", c.precreate},
               {"alignment", c.alignment},
               {"chunk_cache", c.chunk_cache},
               {"hints", c.hints},
               {"bytes_per_step", c.bytes_per_step},
               {"bytes", c.bytes},
               {"create_s", c.create_s},
               {"write_s", c.write_s},
               {"close_s", c.close_s},
               {"step_s", c.step_s},
               {"raw_bytes_per_s", c.raw_bytes_per_s},
               {"aggregate_bytes_per_s", c.aggregate_bytes_per_s},
               {"io_mode", c.io_mode},
               {"no_collective_cause", c.no_collective_cause},
               {"metadata_reads_collective", c.metadata_reads_collective},
               {"metadata_writes_collective", c.metadata_writes_collective},
               {"checked", c.checked},
               {"values_wrong", c.values_wrong}};
  }
  if (r.environment) {
    const auto& e = *r.environment;
    j["environment"] = {{"iotest_version", e.iotest_version}, {"git_revision", e.git_revision},
                        {"hdf5_version", e.hdf5_version},     {"mpi_version", e.mpi_version},
                        {"fftw_version", e.fftw_version},     {"date", e.date},
                        {"command_line", e.command_line},     {"hosts", e.hosts}};
    if (e.output)
      j["environment"]["output_file_system"] = {{"path", e.output->path},
                                                {"mount_point", e.output->mount_point},
                                                {"type", e.output->type},
                                                {"options", e.output->options}};
  }
  if (r.stonewall) {
    const auto& w = *r.stonewall;
    j["stonewall"] = {{"duration_s", w.duration_s},
                      {"ended_early", w.ended_early},
                      {"visits_total", w.visits_total},
                      {"visits_walked", w.visits_walked},
                      {"parts_total", w.parts_total},
                      {"parts_done", w.parts_done},
                      {"visibilities_total", w.visibilities_total},
                      {"visibilities_done", w.visibilities_done},
                      {"fraction", w.fraction},
                      {"projected_s", w.projected_s}};
  }
  if (r.repetitions) {
    json figures = json::object();
    for (const auto& f : r.repetitions->figures)
      figures[f.name] = {
          {"values", f.values}, {"min", f.min}, {"median", f.median}, {"max", f.max}};
    j["repetitions"] = {{"count", r.repetitions->count}, {"figures", figures}};
  }
  if (r.timeline) {
    json ranks = json::array();
    for (const auto& k : r.timeline->ranks)
      ranks.push_back({{"rank", k.rank},
                       {"role", k.role},
                       {"host", k.host},
                       {"busy_s", k.busy_s},
                       {"wait_s", k.wait_s},
                       {"visibilities", k.visibilities},
                       {"bytes_sent", k.bytes_sent},
                       {"bytes_written", k.bytes_written}});
    j["timeline"] = {{"interval_s", r.timeline->interval_s}, {"start_s", 0.0}, {"ranks", ranks}};
  }
  if (r.transit) {
    const auto& t = *r.transit;
    j["transit"] = {{"placement", t.placement},
                    {"writer_ranks", t.writer_ranks},
                    {"writers_per_rank", t.writers_per_rank},
                    {"transit_queue", t.transit_queue},
                    {"chunks_sent", t.chunks_sent},
                    {"bytes_sent", t.bytes_sent},
                    {"bytes_per_s", t.bytes_per_s},
                    {"streamer_queue_wait_s", t.streamer_queue_wait_s},
                    {"send_wait_s", t.send_wait_s},
                    {"writer_idle_s", t.writer_idle_s},
                    {"writer_queue_wait_s", t.writer_queue_wait_s},
                    {"bound", t.bound},
                    {"compute_bytes_per_s", t.compute_bytes_per_s},
                    {"write_bytes_per_s", t.write_bytes_per_s},
                    {"suggested_writer_ranks", t.suggested_writer_ranks}};
  }
  if (r.pipeline) {
    const auto& pl = *r.pipeline;
    json ranks = json::array();
    // Per role: the longest busy, wait and idle times of its ranks.
    json roles = json::object();
    for (const auto& k : pl.per_rank) {
      ranks.push_back({{"rank", k.rank},
                       {"role", k.role},
                       {"host", k.host},
                       {"busy_s", k.busy_s},
                       {"wait_s", k.wait_s},
                       {"idle_s", k.idle_s},
                       {"cpu_s", k.cpu_s},
                       {"messages_sent", k.messages_sent},
                       {"messages_received", k.messages_received},
                       {"bytes_sent", k.bytes_sent},
                       {"bytes_received", k.bytes_received},
                       {"contributions", k.contributions},
                       {"subgrids", k.subgrids},
                       {"visibilities", k.visibilities},
                       {"w_planes", k.w_planes},
                       {"bytes_written", k.bytes_written},
                       {"chunks_written", k.chunks_written},
                       {"chunks_rewritten", k.chunks_rewritten},
                       {"write_s", k.write_s},
                       {"sync_s", k.sync_s},
                       {"open_s", k.open_s},
                       {"queue_high_water",
                        {{"send", k.send_queue_max},
                         {"subgrid", k.subgrid_queue_max},
                         {"task", k.task_queue_max},
                         {"visibility", k.visibility_queue_max}}},
                       {"peak_rss_bytes", k.peak_rss_bytes},
                       {"stages", stages_json(k.stages)}});
      auto& role = roles[k.role];
      if (role.is_null()) role = json::object();
      for (const auto& [key, v] :
           {std::pair{"busy_s", k.busy_s}, {"wait_s", k.wait_s}, {"idle_s", k.idle_s}})
        role[key] = std::max(role.value(key, 0.0), v);
      role["ranks"] = role.value("ranks", 0) + 1;
    }
    j["timing"]["roles"] = roles;
    j["pipeline"] = {{"ranks", pl.ranks},
                     {"producers", pl.producers},
                     {"streamers", pl.streamers},
                     {"assigner", pl.assigner},
                     {"threads", pl.threads},
                     {"producer_threads", pl.producer_threads},
                     {"writers_per_streamer", pl.writers_per_streamer},
                     {"writer_ranks", pl.writer_ranks},
                     {"fork_writer", pl.fork_writer},
                     {"synthetic_vis", pl.synthetic_vis},
                     {"network_only", pl.network_only},
                     {"queues",
                      {{"send", pl.send_queue},
                       {"subgrid", pl.subgrid_queue},
                       {"task", pl.task_queue},
                       {"bls_per_task", pl.bls_per_task},
                       {"visibility", pl.visibility_queue}}},
                     {"subgrid_visits", pl.subgrid_visits},
                     {"subgrid_parts", pl.subgrid_parts},
                     {"slowest_rank", pl.slowest_rank},
                     {"bound", pl.bound},
                     {"per_rank", ranks}};
  }
  if (r.advice) {
    const auto& a = *r.advice;
    json layout = json::array();
    for (const auto& g : a.layout)
      layout.push_back({{"first_node", g.first_node},
                        {"node_count", g.node_count},
                        {"producers", g.producers},
                        {"streamers", g.streamers},
                        {"writers", g.writers},
                        {"assigners", g.assigners},
                        {"bytes", g.bytes},
                        {"fits", g.fits}});
    j["advice"] = {{"nodes", a.nodes},
                   {"ranks_per_node", a.ranks_per_node},
                   {"recommended_ranks", a.recommended_ranks},
                   {"producers", a.producers},
                   {"streamers", a.streamers},
                   {"writer_ranks", a.writer_ranks},
                   {"assigner", a.assigner},
                   {"threads", a.threads},
                   {"producer_threads", a.producer_threads},
                   {"rule", a.rule},
                   {"node_memory_bytes", a.node_memory_bytes},
                   {"node_memory_source", a.node_memory_source},
                   {"layout", layout},
                   {"warnings", a.warnings}};
    if (a.suggested_writer_ranks) {
      j["advice"]["suggested_writer_ranks"] = *a.suggested_writer_ranks;
      j["advice"]["rates_from"] = a.rates_from;
    }
  }
  if (r.scaling) {
    const auto& sc = *r.scaling;
    json points = json::array(), fits = json::array();
    for (const auto& p : sc.points)
      points.push_back({{"n", p.n},
                        {"ranks", p.ranks},
                        {"streamers", p.streamers},
                        {"report", p.report},
                        {"stream_s", number_or_null(p.stream_s)},
                        {"vis_per_s", number_or_null(p.vis_per_s)},
                        {"net_bytes_per_s", number_or_null(p.net_bytes_per_s)},
                        {"write_bytes_per_s", number_or_null(p.write_bytes_per_s)}});
    for (const auto& f : sc.fits)
      fits.push_back({{"stage", f.stage},
                      {"unit", f.unit},
                      {"gamma", number_or_null(f.gamma)},
                      {"alpha", number_or_null(f.alpha)},
                      {"beta", number_or_null(f.beta)},
                      {"gamma_ci", number_or_null(f.gamma_ci)},
                      {"alpha_ci", number_or_null(f.alpha_ci)},
                      {"beta_ci", number_or_null(f.beta_ci)},
                      {"peak_n", number_or_null(f.peak_n)},
                      {"efficiency", number_or_null(f.efficiency)},
                      {"sublinear", f.sublinear},
                      {"negative", f.negative}});
    j["scale"] = {{"n_by", sc.n_by}, {"points", points}, {"fits", fits}, {"plots", sc.plots}};
  }
  if (r.interconnect) {
    const auto& n = *r.interconnect;
    json sizes = json::array();
    for (const auto& z : n.sizes)
      sizes.push_back({{"bytes", z.bytes},
                       {"iterations", z.iterations},
                       {"warmup", z.warmup},
                       {"windows", z.windows},
                       {"window_warmup", z.window_warmup}});
    json pairs = json::array();
    for (const auto& p : n.pairs) {
      json pair = {{"sender", p.sender},
                   {"receiver", p.receiver},
                   {"sender_host", p.sender_host},
                   {"receiver_host", p.receiver_host},
                   {"tcp_address", p.tcp_address}};
      for (size_t t = 0; t < n.transports.size() && t < p.figures.size(); ++t) {
        json figures = json::array();
        for (size_t z = 0; z < n.sizes.size() && z < p.figures[t].size(); ++z) {
          const auto& f = p.figures[t][z];
          figures.push_back({{"bytes", n.sizes[z].bytes},
                             {"latency_us", f.latency_us},
                             {"bandwidth_mb_per_s", f.bandwidth_mb_per_s},
                             {"messages_checked", f.messages_checked},
                             {"messages_wrong", f.messages_wrong}});
        }
        pair[n.transports[t]] = figures;
      }
      pairs.push_back(pair);
    }
    j["net"] = {{"ranks", n.ranks},
                {"nodes", n.nodes},
                {"window", n.window},
                {"transports", n.transports},
                {"units",
                 {{"latency_us", "microseconds, half the mean round trip"},
                  {"bandwidth_mb_per_s", "10^6 bytes per second, sender to receiver"}}},
                {"sizes", sizes},
                {"pairs", pairs},
                {"checked", n.checked},
                {"messages_checked", n.messages_checked},
                {"messages_wrong", n.messages_wrong},
                {"passed", n.messages_wrong == 0}};
  }
  return j;
}

namespace {
std::string environment_text(const Environment& e) {
  std::string hosts;
  for (const auto& h : e.hosts) hosts += (hosts.empty() ? "" : ", ") + h;
  std::string s =
      fmt::format("  iotest {} ({}) on {}, {}; HDF5 {}, {}, {}\n", e.iotest_version, e.git_revision,
                  hosts, e.date, e.hdf5_version, e.mpi_version, e.fftw_version);
  if (e.output)
    s += fmt::format("  {} on {} ({}, mounted at {})\n", e.output->path, e.output->type,
                     e.output->options, e.output->mount_point);
  return s;
}

std::string render_body(const Report& r);

// "1 B", "8 KiB", "64 MiB"; other sizes in bytes.
std::string message_size_text(index_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, ++u;
  return fmt::format("{} {}", b, units[u]);
}

// One table, as OSU and DiFX print theirs: a row per size, latency and
// bandwidth per transport, the mean over the pairs.
std::string interconnect_text(const Interconnect& n) {
  std::string pairs;
  for (const auto& p : n.pairs)
    pairs += fmt::format("{}{}:{}", pairs.empty() ? "" : ", ", p.sender, p.receiver);
  std::string s = fmt::format(
      "iotest net: {} pair(s) ({}) of {} rank(s) on {} node(s), window {}{}\n", n.pairs.size(),
      pairs, n.ranks, n.nodes, n.window, n.pairs.size() > 1 ? ", the mean over the pairs" : "");
  const auto tcp = std::find(n.transports.begin(), n.transports.end(), "tcp");
  if (tcp != n.transports.end() && !n.pairs.empty())
    s += fmt::format("  TCP to {}{}\n", n.pairs.front().tcp_address,
                     n.pairs.size() > 1 ? " (the first pair's)" : "");
  std::string names = fmt::format("  {:<8}", "");
  for (const auto& t : n.transports) {
    std::string name = t;
    std::transform(name.begin(), name.end(), name.begin(), [](char c) {
      return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    });
    names += fmt::format(" {:^27}", name);
  }
  s += names.substr(0, names.find_last_not_of(' ') + 1) + fmt::format("\n  {:<8}", "size");
  for (size_t t = 0; t < n.transports.size(); ++t)
    s += fmt::format(" {:>12} {:>14}", "latency us", "bandwidth MB/s");
  s += "\n";
  for (size_t z = 0; z < n.sizes.size(); ++z) {
    s += fmt::format("  {:<8}", message_size_text(n.sizes[z].bytes));
    for (size_t t = 0; t < n.transports.size(); ++t) {
      double latency = 0, bandwidth = 0;
      for (const auto& p : n.pairs) {
        latency += p.figures[t][z].latency_us / static_cast<double>(n.pairs.size());
        bandwidth += p.figures[t][z].bandwidth_mb_per_s / static_cast<double>(n.pairs.size());
      }
      s += fmt::format(" {:>12.2f} {:>14.2f}", latency, bandwidth);
    }
    s += "\n";
  }
  if (n.checked) {
    s += fmt::format("  --check: {} messages checked, {} wrong", n.messages_checked,
                     n.messages_wrong);
    for (size_t z = 0; z < n.sizes.size() && n.messages_wrong > 0; ++z)
      for (size_t t = 0; t < n.transports.size(); ++t) {
        index_t wrong = 0;
        for (const auto& p : n.pairs) wrong += p.figures[t][z].messages_wrong;
        if (wrong > 0)
          s += fmt::format(", {} at {} over {}", wrong, message_size_text(n.sizes[z].bytes),
                           n.transports[t]);
      }
    s += n.messages_wrong == 0 ? ": passed\n" : ": FAILED\n";
  }
  return s;
}
}  // namespace

std::string render_text(const Report& r) {
  return render_body(r) + (r.environment ? environment_text(*r.environment) : std::string());
}

namespace {
std::string render_body(const Report& r) {
  const auto& p = r.rec;
  std::string s;
  if (r.interconnect) {  // nor does the interconnect benchmark
    s += interconnect_text(*r.interconnect);
    return s;
  }
  if (r.scaling) {  // nor does the scaling study
    const auto& sc = *r.scaling;
    s += fmt::format("iotest scale: {} runs, N = {}\n", sc.points.size(), sc.n_by);
    s += fmt::format("  {:>4} {:>6} {:>10} {:>10} {:>14} {:>14} {:>14}\n", "N", "ranks",
                     "streamers", "stream s", "visibilities/s", "network B/s", "write B/s");
    for (const auto& point : sc.points)
      s += fmt::format("  {:>4} {:>6} {:>10} {:>10.3f} {:>14.4g} {:>14.4g} {:>14.4g}\n", point.n,
                       point.ranks, point.streamers, point.stream_s, point.vis_per_s,
                       point.net_bytes_per_s, point.write_bytes_per_s);
    s += "  Universal Scalability Law X(N) = gamma N / (1 + alpha (N-1) + beta N (N-1)), 95 % "
         "intervals:\n";
    for (const auto& f : sc.fits) {
      std::string flags;
      if (f.sublinear) flags += " sub-linear";
      if (f.negative) flags += " negative (past its peak)";
      s += fmt::format(
          "  {:<11} gamma {:.4g} +/- {:.2g} {}, alpha {:.3g} +/- {:.2g}, beta {:.3g} +/- {:.2g}, "
          "peak N* {:.3g}, efficiency {:.2f} at N = {}{}\n",
          f.stage, f.gamma, f.gamma_ci, f.unit, f.alpha, f.alpha_ci, f.beta, f.beta_ci, f.peak_n,
          f.efficiency, sc.points.empty() ? 0 : sc.points.back().n, flags);
    }
    for (const auto& plot : sc.plots) s += "  plot " + plot + "\n";
    return s;
  }
  if (r.checkpoint) {  // nor does the checkpoint kernel
    const auto& c = *r.checkpoint;
    s += fmt::format(
        "iotest h5: {} rank(s) in a {}x{}x{} grid, {}x{}x{} doubles each, chunks {}x{}x{}, {} "
        "step(s) of {} to {}\n",
        c.ranks, c.grid[0], c.grid[1], c.grid[2], c.domain[0], c.domain[1], c.domain[2], c.chunk[0],
        c.chunk[1], c.chunk[2], c.steps, bytes_text(static_cast<double>(c.bytes_per_step)), c.path);
    s += fmt::format(
        "  {} transfers, metadata {}, fill {}, allocation {}{}{}\n", c.transfer,
        c.collective_metadata ? "collective" : "independent", c.never_fill ? "never" : "default",
        c.alloc, c.precreate ? ", precreated by rank 0" : "",
        c.hints.empty() ? "" : ", hints " + fmt::format("{}", fmt::join(c.hints, " ")));
    s += fmt::format(
        "  create {:.3f} s, write {:.3f} s ({:.3f} GB/s raw), flush and close {:.3f} s: {} at "
        "{:.3f} GB/s aggregate\n",
        c.create_s, c.write_s, c.raw_bytes_per_s / 1e9, c.close_s,
        bytes_text(static_cast<double>(c.bytes)), c.aggregate_bytes_per_s / 1e9);
    s += fmt::format("  HDF5 did: raw data {}{}; metadata reads {}, writes {}\n", c.io_mode,
                     c.no_collective_cause.empty() ? "" : " (" + c.no_collective_cause + ")",
                     c.metadata_reads_collective ? "collective" : "independent",
                     c.metadata_writes_collective ? "collective" : "independent");
    if (c.checked)
      s += c.values_wrong == 0
               ? "  every value read back: right\n"
               : fmt::format("  {} values read back wrong: FAILED\n", c.values_wrong);
    return s;
  }
  if (r.reading && r.mode == "read") {  // a read-back carries no recombination
    const auto& d = *r.reading;
    s += fmt::format(
        "iotest read: {} file(s) ({}{}) on {} rank(s){}: {} chunks, {} in {:.3f} s = {:.3f} GB/s "
        "(inside reads {:.3f} s, opening {:.3f} s, summed over ranks)\n",
        d.files.size(), d.backend, d.direct ? ", O_DIRECT" : "", d.ranks,
        d.caches_dropped ? ", page cache dropped first" : "", d.chunks,
        bytes_text(static_cast<double>(d.bytes)), d.wall_s, d.bytes_per_s / 1e9, d.read_s,
        d.open_s);
    if (d.checked) {
      s += fmt::format("  {} values checked against the synthetic pattern: {} right, {} wrong",
                       d.values_checked, d.values_right, d.values_wrong);
      if (d.values_expected >= 0) s += fmt::format(", {} expected", d.values_expected);
      if (!d.first_wrong.empty()) s += fmt::format(" (first wrong: {})", d.first_wrong);
      s += d.passed ? ": passed\n" : ": FAILED\n";
    }
    return s;
  }
  if (r.verification) {  // nor does a verification
    const auto& v = *r.verification;
    s += fmt::format("iotest verify: {} file(s), {} of {} chunks present", v.files.size(),
                     v.chunks_present, v.chunks_expected);
    if (r.accuracy && r.accuracy->vis_samples)
      s += fmt::format(", visibilities vs {} {} ({} samples)",
                       v.synthetic ? "the synthetic pattern" : "direct FT",
                       error_text(r.accuracy->vis_rmse), *r.accuracy->vis_samples);
    if (v.synthetic) s += ", a synthetic set (--synthetic-vis)";
    if (v.stonewalled)
      s += fmt::format(", stonewalled: {} written parts, {} visibilities", v.written_parts,
                       v.visibilities_written);
    s += v.passed ? ": passed\n" : ": FAILED: " + v.reason + "\n";
    return s;
  }
  if (r.layout) {  // a layout report carries no recombination
    const auto& l = *r.layout;
    s += fmt::format(
        "iotest layout: {}: {} antennas, centre {} E {} N {} m, longest baseline {:.1f} m\n",
        l.vis_set, l.antennas_enu.size(), l.lon_deg, l.lat_deg, l.height_m, l.max_baseline_m);
    if (r.observation)
      s += fmt::format("  {} baselines, time {}, freq {}, dec {}\n", r.counts.baselines.value_or(0),
                       r.observation->time, r.observation->freq, r.observation->dec_deg);
    for (const auto& u : l.uvw)
      s += fmt::format("  baseline {} ({}-{}) at {:g} s: uvw = ({:.3f}, {:.3f}, {:.3f}) m\n",
                       u.baseline, u.antenna1, u.antenna2, u.hour_angle_s, u.u, u.v, u.w);
    return s;
  }
  s += fmt::format("iotest {}: {} ({})\n", r.mode, p.name, p.canonical);
  s += fmt::format("  N={} yB={} yN={} xA={} xM={} W={} f={} m={}\n", p.N, p.yB, p.yN, p.xA, p.xM,
                   p.W, p.f, p.m);
  s += fmt::format(
      "  facets {} ({}x{}, step {}), subgrids {} ({}x{}, step {}), wire efficiency {:.1f}%\n",
      r.counts.facets, p.facets_per_axis, p.facets_per_axis, p.facet_step, r.counts.subgrids,
      p.subgrids_per_axis, p.subgrids_per_axis, p.subgrid_step,
      100 * p.wire_efficiency_per_axis() * p.wire_efficiency_per_axis());
  if (r.settings) {
    const auto& st = *r.settings;
    s += fmt::format(
        "  direction {}, {} subgrids in {} columns, {} sources (seed {}), {} thread(s)\n",
        st.direction, r.counts.subgrids_processed, r.counts.subgrid_columns, st.source_count,
        st.seed, st.threads);
  }
  if (r.accuracy && r.accuracy->pixel_samples) {
    const bool both = !std::isnan(r.accuracy->residual_rms);
    if (both)
      s += fmt::format("  residual (RMS of observed - model over RMS of observed): {}\n",
                       error_text(r.accuracy->residual_rms));
    s += fmt::format("  {} (relative RMSE vs direct adjoint FT): {} ({} pixels sampled)\n",
                     both ? "residual dirty image" : "dirty image",
                     error_text(r.accuracy->facet_rmse), *r.accuracy->pixel_samples);
  } else if (r.accuracy &&
             (std::isfinite(r.accuracy->subgrid_rmse) || std::isfinite(r.accuracy->facet_rmse))) {
    const auto& a = *r.accuracy;
    s += fmt::format(
        "  accuracy (relative RMSE vs direct FT): subgrids {} (max {}, {} checked), "
        "facets {} (max {}, {} checked)\n",
        error_text(a.subgrid_rmse), error_text(a.subgrid_rmse_max), r.counts.subgrids_checked,
        error_text(a.facet_rmse), error_text(a.facet_rmse_max), r.counts.facets_checked);
  }
  if (r.accuracy && r.accuracy->vis_samples)
    s += fmt::format(
        "  visibilities (relative RMSE vs direct FT): {} (worst subgrid {}, {} samples)\n",
        error_text(r.accuracy->vis_rmse), error_text(r.accuracy->vis_rmse_max),
        *r.accuracy->vis_samples);
  if (r.settings && r.settings->support > 0 && r.settings->w_free)
    s += fmt::format("  kernel support {} x {}; every w is 0: one plane a subgrid, no w kernel\n",
                     r.settings->support, r.settings->support);
  else if (r.settings && r.settings->support > 0)
    s += fmt::format(
        "  kernel support {} x {} x {} (w), w-planes {:.4g} wavelengths apart, {} w-stack(s){}\n",
        r.settings->support, r.settings->support, r.settings->w_support, r.settings->w_step,
        r.settings->w_stacks,
        r.settings->w_stack_step > 0
            ? fmt::format(" {:.4g} wavelengths apart", r.settings->w_stack_step)
            : std::string());
  if (r.rates && r.timing && r.timing->degrid_s > 0 && r.mode != "run")
    s += fmt::format(
        "  degrid {:.3f} s: {:.3g} visibilities/s ({:.3g} per thread), {:.1f} w-planes/s\n",
        r.timing->degrid_s, r.rates->vis_per_s, r.rates->vis_per_s_per_thread,
        r.rates->w_planes_per_s);
  if (r.settings && !r.settings->output.empty())
    s += fmt::format(
        "  wrote {} in {} chunks (+{} rewritten) to {} ({}: writes {:.3f} s, sync and close "
        "{:.3f} s, {:.3g} B/s, {}{})\n",
        bytes_text(static_cast<double>(r.counts.bytes_written.value_or(0))),
        r.counts.chunks_written.value_or(0), r.counts.chunks_rewritten.value_or(0),
        r.settings->output, r.settings->backend, r.timing ? r.timing->write_s : 0.0,
        r.timing ? r.timing->sync_s : 0.0, r.rates ? r.rates->write_bytes_per_s : 0.0,
        r.settings->durability,
        r.timing && r.timing->open_s > 0
            ? fmt::format("; opened with headers in {:.3f} s before the start", r.timing->open_s)
            : "");
  if (r.rates && r.timing) {
    const auto& t = *r.timing;
    const auto& q = *r.rates;
    if (t.predict_s > 0)
      s += fmt::format("  predict {:.3f} s: {:.1f} subgrids/s, {:.2f} GFLOP/s\n", t.predict_s,
                       q.predict_subgrids_per_s, q.predict_gflops);
    if (t.image_s > 0 && r.mode == "grid")
      s += fmt::format(
          "  grid {:.3f} s: {:.3g} visibilities/s ({:.3g} per thread), {:.1f} w-planes/s{}\n",
          t.image_s, q.vis_per_s, q.vis_per_s_per_thread, q.w_planes_per_s,
          t.input_s > 0
              ? fmt::format(" (visibilities predicted in memory apart: {:.3f} s)", t.input_s)
              : std::string());
    if (r.reading && r.mode != "read")
      s += fmt::format(
          "  read {} file(s) ({}{}): {} chunk reads{}, {} in {:.3f} s, {:.3g} B/s (inside reads "
          "{:.3f} s)\n",
          r.reading->files.size(), r.reading->backend, r.reading->direct ? ", O_DIRECT" : "",
          r.reading->chunks,
          r.reading->chunks_stored > 0
              ? fmt::format(" of {} chunks stored ({} read again)", r.reading->chunks_stored,
                            r.reading->chunks_reread)
              : std::string(),
          bytes_text(static_cast<double>(r.reading->bytes)), r.reading->wall_s,
          r.reading->bytes_per_s, r.reading->read_s);
    if (t.image_s > 0 && r.mode != "grid" && r.mode != "run")
      s += fmt::format("  image   {:.3f} s: {:.1f} subgrids/s, {:.2f} GFLOP/s\n", t.image_s,
                       q.image_subgrids_per_s, q.image_gflops);
    s += fmt::format("  wall {:.3f} s (planning {:.3f} s, checks {:.3f} s)\n", t.wall_s,
                     t.planning_s, t.check_s);
  }
  if (r.observation) {
    const auto& o = *r.observation;
    s += fmt::format("  vis-set {} ({}): {} antennas, {} baselines{}, dec {}\n", o.vis_set,
                     o.description, o.antennas, r.counts.baselines.value_or(0),
                     o.autocorrelations ? " with autocorrelations" : "", o.dec_deg);
    s += fmt::format("  time {} ({} chunks), freq {} ({} chunks)\n", o.time, o.time_chunks, o.freq,
                     o.freq_chunks);
    s += fmt::format(
        "  {} visibilities, {} {}; grid cell {:.3g} wavelengths, field {:.4g} "
        "(direction cosines)\n",
        r.counts.visibilities.value_or(0), bytes_text(static_cast<double>(o.visibility_bytes)),
        r.mode == "grid" || (r.settings && r.settings->direction != "predict") ? "of them"
                                                                               : "to write",
        o.cell_uv, o.field_lm);
    s += fmt::format(
        "  subgrids used {} of {}; visibilities per subgrid min {} mean {:.0f} max {}\n",
        r.counts.subgrids_used.value_or(0), r.counts.subgrids, o.vis_per_subgrid_min,
        o.vis_per_subgrid_mean, o.vis_per_subgrid_max);
  }
  if (r.pipeline && r.timing && r.rates) {
    const auto& pl = *r.pipeline;
    const auto& t = *r.timing;
    const auto& q = *r.rates;
    s += fmt::format(
        "  stream {:.3f} s (planning {:.3f} s, wall {:.3f} s): {:.1f} subgrids/s, "
        "network {}/s",
        t.stream_s, t.planning_s, t.wall_s, q.subgrids_per_s, bytes_text(q.net_bytes_per_s));
    if (r.observation)
      s += fmt::format(", {:.3g} visibilities/s, {:.1f} w-planes/s", q.vis_per_s, q.w_planes_per_s);
    s += "\n";
    if (r.settings && r.settings->direction != "predict" && !pl.synthetic_vis)
      s += fmt::format(
          "  stages, the busiest streamer thread: degrid the model {:.3f} s, grid {:.3f} s{}\n",
          t.degrid_s, t.image_s,
          t.input_s > 0 ? fmt::format(" (predicting visibilities apart: {:.3f} s)", t.input_s)
                        : std::string());
    if (t.stages) {
      const auto& g = *t.stages;
      s += fmt::format(
          "  stages (thread-seconds over the ranks): facets {:.2f}, columns {:.2f}, "
          "contributions {:.2f}, subgrid assembly {:.2f}, track pieces {:.2f}, w-towers {:.2f}, "
          "degrid tasks {:.2f}\n",
          g.facet_s, g.column_s, g.contribution_s, g.assembly_s, g.pieces_s, g.tower_s,
          g.degrid_task_s);
    }
    if (r.counts.bytes_sent.value_or(0) > 0)
      s += fmt::format("  sent {} in contributions, received {}\n",
                       bytes_text(static_cast<double>(*r.counts.bytes_sent)),
                       bytes_text(static_cast<double>(r.counts.bytes_received.value_or(0))));
    if (r.counts.visibilities_written)
      s += fmt::format("  {} visibilities written ({} expected)\n", *r.counts.visibilities_written,
                       r.counts.visibilities.value_or(0));
    s += fmt::format("  {:<5} {:<9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>9} {:>11} {:>10}\n",
                     "rank", "role", "busy s", "wait s", "idle s", "cpu s", "sent", "received",
                     "subgrids", "vis", "written");
    for (const auto& k : pl.per_rank)
      s += fmt::format(
          "  {:<5} {:<9} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>10} {:>10} {:>9} {:>11} {:>10}\n",
          k.rank, k.role, k.busy_s, k.wait_s, k.idle_s, k.cpu_s,
          bytes_text(static_cast<double>(k.bytes_sent)),
          bytes_text(static_cast<double>(k.bytes_received)), k.subgrids, k.visibilities,
          bytes_text(static_cast<double>(k.bytes_written)));
    s += fmt::format("  busiest rank {}; bound by {}{}\n", pl.slowest_rank, pl.bound,
                     pl.synthetic_vis ? " (synthetic visibilities: storage only)" : "");
  }
  if (r.transit) {
    const auto& t = *r.transit;
    if (t.writer_ranks > 0)
      s += fmt::format(
          "  in transit: {} chunks ({}) sent to {} writer rank(s), {}/s; waits: degridding on the "
          "queue {:.2f} s, sends on the writer group {:.2f} s, writer ranks idle {:.2f} s and on "
          "their writers {:.2f} s; bound by the {}\n",
          t.chunks_sent, bytes_text(static_cast<double>(t.bytes_sent)), t.writer_ranks,
          bytes_text(t.bytes_per_s), t.streamer_queue_wait_s, t.send_wait_s, t.writer_idle_s,
          t.writer_queue_wait_s, t.bound);
    else
      s += fmt::format(
          "  in situ: degridding waited {:.2f} s on the writers' queues; bound by the {}\n",
          t.streamer_queue_wait_s, t.bound);
    s += fmt::format(
        "  a streamer makes {}/s of chunks, a writer writes {}/s: {} writer rank(s) of {} "
        "writer(s) would keep pace (--writer-ranks)\n",
        bytes_text(t.compute_bytes_per_s), bytes_text(t.write_bytes_per_s),
        t.suggested_writer_ranks, std::max(1, t.writers_per_rank));
  }
  if (r.repetitions) {
    s += fmt::format(
        "  {} repetitions (the figures above are the last's):\n    {:<28} {:>10} "
        "{:>10} {:>10}\n",
        r.repetitions->count, "figure", "min", "median", "max");
    for (const auto& f : r.repetitions->figures)
      s +=
          fmt::format("    {:<28} {:>10.4g} {:>10.4g} {:>10.4g}\n", f.name, f.min, f.median, f.max);
  }
  if (r.stonewall) {
    const auto& w = *r.stonewall;
    s += fmt::format(
        "  stonewall {:g} s{}: {} of {} visibilities ({:.3g} %), {} of {} visits walked, {} of "
        "{} parts degridded whole; the whole observation would take {:.3g} s on these ranks\n",
        w.duration_s, w.ended_early ? "" : " (the walk ended first)", w.visibilities_done,
        w.visibilities_total, 100 * w.fraction, w.visits_walked, w.visits_total, w.parts_done,
        w.parts_total, w.projected_s);
  }
  const auto& m = r.memory;
  s += fmt::format("  memory: image {}, facet {} (prepared {}), contribution {}, subgrid {}\n",
                   bytes_text(static_cast<double>(m.image_bytes)),
                   bytes_text(static_cast<double>(m.facet_bytes)),
                   bytes_text(static_cast<double>(m.prepared_facet_bytes)),
                   bytes_text(static_cast<double>(m.contribution_bytes)),
                   bytes_text(static_cast<double>(m.subgrid_bytes)));
  s += fmt::format(
      "          per facet worker {}, per streamer {}{}{}, single process {}",
      bytes_text(m.producer_bytes), bytes_text(m.streamer_bytes),
      m.assigner_bytes > 0 ? ", per assigner " + bytes_text(m.assigner_bytes) : std::string(),
      m.writer_bytes > 0 ? ", per writer rank " + bytes_text(m.writer_bytes) : std::string(),
      bytes_text(m.single_process_bytes));
  if (m.peak_rss_bytes)
    s += fmt::format(", peak RSS {}", bytes_text(static_cast<double>(*m.peak_rss_bytes)));
  s += "\n";
  if (r.advice) s += advice_text(*r.advice, r.observation);
  return s;
}
}  // namespace

json read_json(const std::string& path, const std::string& option) {
  std::ifstream in(path);
  if (!in) throw UsageError(option, "cannot read '" + path + "'");
  try {
    return json::parse(in);
  } catch (const json::exception&) {
    throw UsageError(option, "'" + path + "' is not a JSON report");
  }
}

index_t writer_ranks_for(index_t streamers, double compute, double write, int writers_per_rank) {
  const double per_rank = write * std::max(1, writers_per_rank);
  if (!(per_rank > 0)) return 0;
  return std::max<index_t>(
      1, static_cast<index_t>(std::ceil(static_cast<double>(streamers) * compute / per_rank)));
}

Report with_repetitions(std::vector<Report> runs) {
  if (runs.empty()) throw std::logic_error("no repetitions");
  using Get = std::function<std::optional<double>(const Report&)>;
  const auto rate = [](double Rates::*field) -> Get {
    return [field](const Report& r) {
      return r.rates ? std::optional<double>(*r.rates.*field) : std::nullopt;
    };
  };
  const std::vector<std::pair<const char*, Get>> figures = {
      {"timing.stream_s",
       [](const Report& r) { return r.timing ? std::optional(r.timing->stream_s) : std::nullopt; }},
      {"rates.subgrids_per_s", rate(&Rates::subgrids_per_s)},
      {"rates.net_bytes_per_s", rate(&Rates::net_bytes_per_s)},
      {"rates.vis_per_s", rate(&Rates::vis_per_s)},
      {"rates.vis_per_s_per_thread", rate(&Rates::vis_per_s_per_thread)},
      {"rates.w_planes_per_s", rate(&Rates::w_planes_per_s)},
      {"rates.write_bytes_per_s", rate(&Rates::write_bytes_per_s)},
      {"rates.raw_write_bytes_per_s", rate(&Rates::raw_write_bytes_per_s)},
      {"read.bytes_per_s",
       [](const Report& r) {
         return r.reading ? std::optional(r.reading->bytes_per_s) : std::nullopt;
       }},
      {"transit.bytes_per_s",
       [](const Report& r) {
         return r.transit ? std::optional(r.transit->bytes_per_s) : std::nullopt;
       }},
  };
  Repetitions reps;
  reps.count = static_cast<int>(runs.size());
  for (const auto& [name, get] : figures) {
    Repetitions::Figure f;
    f.name = name;
    for (const auto& r : runs)
      if (const auto v = get(r)) f.values.push_back(*v);
    // A figure every run has and some run measured.
    if (f.values.size() != runs.size() ||
        std::all_of(f.values.begin(), f.values.end(), [](double v) { return v == 0; }))
      continue;
    auto sorted = f.values;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    f.min = sorted.front();
    f.max = sorted.back();
    f.median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    reps.figures.push_back(f);
  }
  Report last = std::move(runs.back());
  last.repetitions = reps;
  return last;
}

std::string render_run_plan(const Report& r) {
  const auto& p = r.rec;
  const auto& pl = *r.pipeline;
  std::string s =
      fmt::format("iotest run: {} ({}), {} facets, {} subgrid visits in {} parts\n", p.name,
                  p.canonical, r.counts.facets, pl.subgrid_visits, pl.subgrid_parts);
  s += fmt::format(
      "  {} ranks: {} producer(s) x {} thread(s), {} streamer(s) x {} thread(s){}{}\n", pl.ranks,
      pl.producers, pl.producer_threads, pl.streamers, pl.threads,
      pl.assigner ? ", 1 assigner" : ", static assignment",
      pl.writer_ranks > 0
          ? fmt::format(", {} writer rank(s) x {} writer {} (in transit)", pl.writer_ranks,
                        pl.writers_per_streamer, pl.fork_writer ? "process(es)" : "thread(s)")
      : pl.writers_per_streamer > 0
          ? fmt::format(", {} writer {} per streamer", pl.writers_per_streamer,
                        pl.fork_writer ? "process(es)" : "thread(s)")
          : std::string());
  s += fmt::format("  queues: send {}, subgrid {}, task {}, bls-per-task {}, visibility {}\n",
                   pl.send_queue, pl.subgrid_queue, pl.task_queue, pl.bls_per_task,
                   pl.visibility_queue);
  if (pl.network_only)
    s += "  network only: the walk's contributions sent as they are with the same slots, "
         "nothing computed\n";
  const bool reads = r.settings && r.settings->direction != "predict";
  if (pl.synthetic_vis)
    s += reads ? "  synthetic visibilities (storage only): no producers, no gridding, every value "
                 "read checked against the pattern\n"
               : "  synthetic visibilities (storage only): no producers, no degridding, a pattern "
                 "written as the real run would\n";
  s += fmt::format("  memory estimate: producer {}, streamer {}{}\n",
                   bytes_text(static_cast<double>(r.memory.producer_bytes)),
                   bytes_text(static_cast<double>(r.memory.streamer_bytes)),
                   r.memory.writer_bytes > 0
                       ? ", writer rank " + bytes_text(static_cast<double>(r.memory.writer_bytes))
                       : std::string());
  const bool imaging =
      r.settings && (r.settings->direction == "image" || r.settings->direction == "both");
  std::string where =
      r.settings && !r.settings->output.empty() ? "-> " + r.settings->output : "-> null (dry run)";
  if (imaging)
    where = r.reading
                ? fmt::format("<- {} file(s) {}{}, into the dirty image", r.reading->files.size(),
                              r.reading->files.front(), r.reading->files.size() > 1 ? " ..." : "")
                : "predicted by the streamers (no files), into the dirty image";
  if (imaging && r.pipeline && r.pipeline->synthetic_vis && r.reading)
    where =
        fmt::format("<- {} file(s) {}{}, read and checked (storage only)", r.reading->files.size(),
                    r.reading->files.front(), r.reading->files.size() > 1 ? " ..." : "");
  if (imaging && r.settings->direction == "both")
    where += " (the residual: observed minus the model degridded from the facets)";
  if (r.observation)
    s += fmt::format("  {} visibilities ({}) of {} over {} subgrids {}\n",
                     r.counts.visibilities.value_or(0),
                     bytes_text(static_cast<double>(r.observation->visibility_bytes)),
                     r.observation->vis_set, r.counts.subgrids_used.value_or(0), where);
  return s;
}

namespace {
bool is_regular_or_absent(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode);
}
std::string temp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}
}  // namespace

void check_writable(const std::string& path) {
  if (path.empty()) throw UsageError("--report", "expected a file name, got an empty one");
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))  // W_OK alone would pass it
    throw UsageError("--report", "expected a file name, got the folder '" + path + "'");
  if (!is_regular_or_absent(path)) {
    if (::access(path.c_str(), W_OK) != 0)
      throw UsageError("--report", "cannot write '" + path + "': " + std::strerror(errno));
    return;
  }
  // Probe with the temporary name the final write will use.
  const std::string tmp = temp_name(path);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw UsageError("--report", "cannot write '" + path + "': " + std::strerror(errno));
  std::fclose(f);
  std::remove(tmp.c_str());
}

void write_json(const Report& report, const std::string& path) {
  const std::string text = to_json(report).dump(2) + "\n";
  const bool direct = !is_regular_or_absent(path);
  const std::string target = direct ? path : temp_name(path);
  std::FILE* f = std::fopen(target.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f) ok = (std::fclose(f) == 0) && ok;
  if (ok && !direct) ok = std::rename(target.c_str(), path.c_str()) == 0;
  if (!ok) {
    const std::string why = std::strerror(errno);
    if (!direct) std::remove(target.c_str());
    throw std::runtime_error("--report: writing '" + path + "' failed: " + why);
  }
}

}  // namespace iotest::report
