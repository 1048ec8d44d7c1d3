// The sections the computing commands share: the parameters and settings,
// accuracy, rates, counts, timing, the observation, memory, the sky and the
// environment. Each: its JSON, its text and its CSV next to each other.
#include <fmt/format.h>

#include <cmath>

#include "iotest/report/sections.hpp"

namespace iotest::report::detail {

namespace {
// Layout and verify reports carry no recombination: no parameters, counts
// or memory of one.
bool has_recombination(const Report& r) {
  return r.rec.N > 0;
}

json params_json(const config::RecombinationParams& p) {
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

std::string optional_cell(const std::optional<index_t>& v) {
  return v ? csv_cell(*v) : std::string();
}
}  // namespace

// schema_version and mode: the report's own.

json schema_version_json(const Report&) {
  return kSchemaVersion;
}

json mode_json(const Report& r) {
  return r.mode;
}

void mode_summary(const Report& r, Summary& out) {
  out.add("mode", r.mode);
}

// config: the recombination set's parameters, the run's settings and the
// observation's, in one object (empty without a recombination).

namespace {
// --file-layout's fields as given (bytes), the others left out.
json file_layout_request_json(const FileLayout& l) {
  json j = json::object();
  if (l.object_size > 0) j["object_size"] = l.object_size;
  if (l.stripe_unit > 0) j["stripe_unit"] = l.stripe_unit;
  if (l.stripe_count > 0) j["stripe_count"] = l.stripe_count;
  if (!l.pool.empty()) j["pool"] = l.pool;
  return j;
}
}  // namespace

json config_json(const Report& r) {
  json j = has_recombination(r) ? params_json(r.rec) : json::object();
  if (r.settings) {
    const auto& s = *r.settings;
    j["source_count"] = s.source_count;
    j["seed"] = s.seed;
    j["direction"] = s.direction;
    j["subgrids"] = s.subgrids;
    j["check"] = s.check;
    j["threads"] = s.threads;
    if (s.support > 0) {
      j["support"] = s.support;
      j["w_support"] = s.w_support;
      j["w_free"] = s.w_free;
      j["w_step"] = s.w_step;
      j["w_stack_step"] = s.w_stack_step;
      j["w_stacks"] = s.w_stacks;
      j["tower_half_height"] = s.tower_half_height;
      if (s.target_err > 0) {
        j["target_err"] = s.target_err;
        j["tower_error_at_zero"] = s.tower_error_at_zero;
      }
      j["vis_samples"] = s.vis_samples;
    }
    if (!s.backend.empty()) {  // with visibilities (degridded or synthetic)
      j["backend"] = s.backend;
      j["durability"] = s.durability;
      j["value_bytes"] = s.value_bytes;
      j["nonce"] = s.nonce;
      j["output"] = s.output;
      j["outputs_replaced"] = s.outputs_replaced;
      if (s.store)
        j["store"] = {{"kind", s.store->kind},
                      {"endpoint", s.store->endpoint},
                      {"server", s.store->server},
                      {"bucket", s.store->bucket},
                      {"region", s.store->region},
                      {"credentials_from", s.store->credentials_from},
                      {"part_bytes", s.store->part_bytes},
                      {"requests_in_flight", s.store->requests_in_flight}};
    }
    if (s.file_layout)
      j["file_layout"] = {
          {"requested", file_layout_request_json(*s.file_layout)},
          {"applied", s.file_layout_applied},
          {"not_applied_why",
           s.file_layout_applied ? json(nullptr) : json(s.file_layout_not_applied_why)}};
  }
  if (r.observation) {
    const auto& o = *r.observation;
    j["vis_set"] = o.vis_set;
    j["time"] = o.time;
    j["freq"] = o.freq;
    j["dec"] = o.dec_deg;
  }
  return j;
}

std::string config_text(const Report& r) {
  const auto& p = r.rec;
  std::string s = fmt::format("iotest {}: {} ({})\n", r.mode, p.name, p.canonical);
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
  return s;
}

void config_summary(const Report& r, Summary& out) {
  const RunSettings* s = r.settings ? &*r.settings : nullptr;
  out.add("rec_set", has_recombination(r) ? r.rec.name : std::string());
  out.add("vis_set", r.observation ? r.observation->vis_set : std::string());
  out.add("direction", s, &RunSettings::direction);
  out.add("threads", s, &RunSettings::threads);
  out.add("backend", s, &RunSettings::backend);
}

// accuracy

json to_json(const Accuracy& a) {
  json j = {{"definition", kAccuracyDefinition},
            {"subgrid_rmse", number_or_null(a.subgrid_rmse)},
            {"subgrid_rmse_max", number_or_null(a.subgrid_rmse_max)},
            {"facet_rmse", number_or_null(a.facet_rmse)},
            {"facet_rmse_max", number_or_null(a.facet_rmse_max)}};
  if (a.vis_samples) {
    j["vis_rmse"] = number_or_null(a.vis_rmse);
    j["vis_rmse_max"] = number_or_null(a.vis_rmse_max);
    j["vis_samples"] = *a.vis_samples;
  }
  if (a.pixel_samples) j["pixel_samples"] = *a.pixel_samples;
  if (!std::isnan(a.residual_rms)) j["residual_rms"] = a.residual_rms;
  return j;
}

std::string render_text(const Accuracy& a, const Report& r) {
  std::string s;
  if (a.pixel_samples) {
    const bool both = !std::isnan(a.residual_rms);
    if (both)
      s += fmt::format("  residual (RMS of observed - model over RMS of observed): {}\n",
                       error_text(a.residual_rms));
    s += fmt::format("  {} (relative RMSE vs direct adjoint FT): {} ({} pixels sampled)\n",
                     both ? "residual dirty image" : "dirty image", error_text(a.facet_rmse),
                     *a.pixel_samples);
  } else if (std::isfinite(a.subgrid_rmse) || std::isfinite(a.facet_rmse)) {
    s += fmt::format(
        "  accuracy (relative RMSE vs direct FT): subgrids {} (max {}, {} checked), "
        "facets {} (max {}, {} checked)\n",
        error_text(a.subgrid_rmse), error_text(a.subgrid_rmse_max), r.counts.subgrids_checked,
        error_text(a.facet_rmse), error_text(a.facet_rmse_max), r.counts.facets_checked);
  }
  if (a.vis_samples)
    s += fmt::format(
        "  visibilities (relative RMSE vs direct FT): {} (worst subgrid {}, {} samples)\n",
        error_text(a.vis_rmse), error_text(a.vis_rmse_max), *a.vis_samples);
  return s;
}

void summarise(const Accuracy* a, Summary& out) {
  out.add("subgrid_rmse", a, &Accuracy::subgrid_rmse);
  out.add("subgrid_rmse_max", a, &Accuracy::subgrid_rmse_max);
  out.add("facet_rmse", a, &Accuracy::facet_rmse);
  out.add("facet_rmse_max", a, &Accuracy::facet_rmse_max);
  out.add("vis_rmse", a, &Accuracy::vis_rmse);
  out.add("vis_rmse_max", a, &Accuracy::vis_rmse_max);
  out.add("residual_rms", a, &Accuracy::residual_rms);
}

// The settings' kernel (its JSON is in config's).

std::string kernel_text(const Report& r) {
  if (!r.settings || r.settings->support <= 0) return {};
  const auto& st = *r.settings;
  if (st.w_free)
    return fmt::format("  kernel support {} x {}; every w is 0: one plane a subgrid, no w kernel\n",
                       st.support, st.support);
  return fmt::format(
      "  kernel support {} x {} x {} (w), w-planes {:.4g} wavelengths apart, {} w-stack(s){}\n",
      st.support, st.support, st.w_support, st.w_step, st.w_stacks,
      st.w_stack_step > 0 ? fmt::format(" {:.4g} wavelengths apart", st.w_stack_step)
                          : std::string());
}

// rates

json to_json(const Rates& t) {
  return {{"predict_subgrids_per_s", t.predict_subgrids_per_s},
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

// The degridding chain's rate (degrid; the run's is in the pipeline's lines).
std::string render_text(const Rates& q, const Report& r) {
  if (!(r.timing && r.timing->degrid_s > 0 && r.mode != "run")) return {};
  return fmt::format(
      "  degrid {:.3f} s: {:.3g} visibilities/s ({:.3g} per thread), {:.1f} w-planes/s\n",
      r.timing->degrid_s, q.vis_per_s, q.vis_per_s_per_thread, q.w_planes_per_s);
}

void summarise(const Rates* q, Summary& out) {
  out.add("predict_subgrids_per_s", q, &Rates::predict_subgrids_per_s);
  out.add("image_subgrids_per_s", q, &Rates::image_subgrids_per_s);
  out.add("predict_gflops", q, &Rates::predict_gflops);
  out.add("image_gflops", q, &Rates::image_gflops);
  out.add("gflops", q, &Rates::gflops);
  out.add("subgrids_per_s", q, &Rates::subgrids_per_s);
  out.add("vis_per_s", q, &Rates::vis_per_s);
  out.add("vis_per_s_per_thread", q, &Rates::vis_per_s_per_thread);
  out.add("w_planes_per_s", q, &Rates::w_planes_per_s);
  out.add("net_bytes_per_s", q, &Rates::net_bytes_per_s);
  out.add("write_bytes_per_s", q, &Rates::write_bytes_per_s);
  out.add("raw_write_bytes_per_s", q, &Rates::raw_write_bytes_per_s);
}

// counts

// Bytes written over the visibilities' own bytes: what partial-chunk
// rewrites (and chunks reaching past the observation) cost the storage.
std::optional<double> rewrite_factor(const Report& r) {
  const auto vis = r.counts.visibilities_written.value_or(0);
  if (!r.counts.bytes_written || vis <= 0) return std::nullopt;
  // Of the bytes the back-end stores per visibility (ms: single precision).
  const double value_bytes =
      r.settings ? static_cast<double>(r.settings->value_bytes) : static_cast<double>(sizeof(cplx));
  return static_cast<double>(*r.counts.bytes_written) / (static_cast<double>(vis) * value_bytes);
}

json counts_json(const Report& r) {
  json j;
  if (has_recombination(r))
    j = {{"facets", r.counts.facets},
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
    if (value) j[key] = *value;
  if (const auto f = rewrite_factor(r)) j["rewrite_factor"] = *f;
  return j;
}

// --file-layout's line: what was asked and whether the outputs have it.
std::string file_layout_text(const RunSettings& s) {
  if (!s.file_layout) return {};
  return fmt::format("  --file-layout={}: {}\n", layout_request_text(*s.file_layout),
                     s.file_layout_applied ? "set on the outputs"
                                           : s.file_layout_not_applied_why +
                                                 "; written with the file system's own layout");
}

// The store, where the outputs' names do not say it (an object store).
std::string store_text(const RunSettings& s) {
  if (!s.store) return {};
  const auto& d = *s.store;
  return fmt::format(
      "  store: {} at {} ({}), bucket {}, region {}, keys from {}; parts of {}, "
      "{} in flight per writer\n",
      d.kind, d.endpoint, d.server.empty() ? "its server unnamed" : d.server, d.bucket, d.region,
      d.credentials_from, bytes_text(static_cast<double>(d.part_bytes)), d.requests_in_flight);
}

// What was written, where and how fast.
std::string counts_text(const Report& r) {
  if (!r.settings) return {};
  if (r.settings->output.empty()) return file_layout_text(*r.settings);  // --image's alone
  const std::string wrote = fmt::format(
      "  wrote {} in {} chunks (+{} rewritten; {:.3f}x the visibilities' bytes) to {} ({}: "
      "writes {:.3f} s, sync and close "
      "{:.3f} s, {:.3g} B/s, {}{}{})\n",
      bytes_text(static_cast<double>(r.counts.bytes_written.value_or(0))),
      r.counts.chunks_written.value_or(0), r.counts.chunks_rewritten.value_or(0),
      rewrite_factor(r).value_or(0.0), r.settings->output, r.settings->backend,
      r.timing ? r.timing->write_s : 0.0, r.timing ? r.timing->sync_s : 0.0,
      r.rates ? r.rates->write_bytes_per_s : 0.0, r.settings->durability,
      r.timing && r.timing->open_s > 0
          ? fmt::format("; opened with headers in {:.3f} s before the start", r.timing->open_s)
          : "",
      r.settings->outputs_replaced > 0
          ? fmt::format("; replaced {} file(s) there before the run", r.settings->outputs_replaced)
          : "");
  return wrote + store_text(*r.settings) + file_layout_text(*r.settings);
}

void counts_summary(const Report& r, Summary& out) {
  out.add("visibilities", optional_cell(r.counts.visibilities));
  out.add("visibilities_written", optional_cell(r.counts.visibilities_written));
  out.add("bytes_written", optional_cell(r.counts.bytes_written));
  out.add("chunks_written", optional_cell(r.counts.chunks_written));
  out.add("bytes_sent", optional_cell(r.counts.bytes_sent));
}

// timing (with the run's roles, from the pipeline's ranks)

json to_json(const StageSeconds& k) {
  json j = json::object();
  for_each_stage(k, [&](const char* name, double v) { j[name] = v; });
  return j;
}

json timing_json(const Report& r) {
  json j;
  if (r.timing) {
    const auto& t = *r.timing;
    j = {{"wall_s", t.wall_s},     {"planning_s", t.planning_s}, {"predict_s", t.predict_s},
         {"image_s", t.image_s},   {"input_s", t.input_s},       {"check_s", t.check_s},
         {"degrid_s", t.degrid_s}, {"write_s", t.write_s},       {"sync_s", t.sync_s},
         {"open_s", t.open_s},     {"stream_s", t.stream_s}};
    if (t.stages) j["stages"] = to_json(*t.stages);
  }
  if (r.pipeline) j["roles"] = roles_json(*r.pipeline);
  return j;
}

// The timed phases, with the rates (the run's stream is the pipeline's).
std::string render_text(const Timing& t, const Report& r) {
  if (!r.rates) return {};
  const auto& q = *r.rates;
  std::string s;
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
  if (r.reading && r.mode != "read") s += read_line(*r.reading);
  if (t.image_s > 0 && r.mode != "grid" && r.mode != "run")
    s += fmt::format("  image   {:.3f} s: {:.1f} subgrids/s, {:.2f} GFLOP/s\n", t.image_s,
                     q.image_subgrids_per_s, q.image_gflops);
  s += fmt::format("  wall {:.3f} s (planning {:.3f} s, checks {:.3f} s)\n", t.wall_s, t.planning_s,
                   t.check_s);
  return s;
}

void summarise(const Timing* t, Summary& out) {
  out.add("wall_s", t, &Timing::wall_s);
  out.add("planning_s", t, &Timing::planning_s);
  out.add("predict_s", t, &Timing::predict_s);
  out.add("image_s", t, &Timing::image_s);
  out.add("input_s", t, &Timing::input_s);
  out.add("check_s", t, &Timing::check_s);
  out.add("degrid_s", t, &Timing::degrid_s);
  out.add("stream_s", t, &Timing::stream_s);
  out.add("open_s", t, &Timing::open_s);
  out.add("write_s", t, &Timing::write_s);
  out.add("sync_s", t, &Timing::sync_s);
}

// observation

json to_json(const Observation& o) {
  json j = {{"vis_set", o.vis_set},
            {"description", o.description},
            {"antennas", o.antennas},
            {"autocorrelations", o.autocorrelations},
            {"time_chunks", o.time_chunks},
            {"freq_chunks", o.freq_chunks},
            {"visibility_bytes", o.visibility_bytes}};
  if (o.autocorrelations_imaged) j["autocorrelations_imaged"] = *o.autocorrelations_imaged;
  if (o.visibilities_imaged) j["visibilities_imaged"] = *o.visibilities_imaged;
  if (o.cell_uv > 0) {  // with a recombination: the grid and the work per subgrid
    j["grid"] = {{"max_uv_wavelengths", o.max_uv},
                 {"pixel_lm", o.pixel_lm},
                 {"cell_wavelengths", o.cell_uv},
                 {"field_lm", o.field_lm}};
    j["vis_per_subgrid"] = {{"min", o.vis_per_subgrid_min},
                            {"mean", o.vis_per_subgrid_mean},
                            {"max", o.vis_per_subgrid_max}};
  }
  return j;
}

namespace {

// How the text names the autocorrelations: whether there are any, and in
// the imaging direction whether the image took them.
std::string autocorrelations_text(const Observation& o) {
  if (!o.autocorrelations) return "";
  if (!o.autocorrelations_imaged) return " with autocorrelations";
  return *o.autocorrelations_imaged ? " with autocorrelations (imaged)"
                                    : " with autocorrelations (left out of the image)";
}

// Whether the command writes the observation's visibilities (predict),
// rather than reading or gridding them.
bool writes_visibilities(const Report& r) {
  if (r.mode == "grid") return false;
  if (r.settings) return r.settings->direction == "predict";
  if (r.advice) return r.advice->direction == "predict";
  return true;
}

}  // namespace

bool image_leaves_rows_out(const Observation& o, const Report& r) {
  return o.visibilities_imaged && *o.visibilities_imaged < r.counts.visibilities.value_or(0);
}

std::string render_text(const Observation& o, const Report& r) {
  std::string s = fmt::format("  vis-set {} ({}): {} antennas, {} baselines{}, dec {}\n", o.vis_set,
                              o.description, o.antennas, r.counts.baselines.value_or(0),
                              autocorrelations_text(o), o.dec_deg);
  s += fmt::format("  time {} ({} chunks), freq {} ({} chunks)\n", o.time, o.time_chunks, o.freq,
                   o.freq_chunks);
  s += fmt::format(
      "  {} visibilities, {} {}{}; grid cell {:.3g} wavelengths, field {:.4g} "
      "(direction cosines)\n",
      r.counts.visibilities.value_or(0), bytes_text(static_cast<double>(o.visibility_bytes)),
      writes_visibilities(r) ? "to write" : "of them",
      image_leaves_rows_out(o, r)
          ? fmt::format(", {} imaged (the cross-correlations)", *o.visibilities_imaged)
          : std::string(),
      o.cell_uv, o.field_lm);
  s += fmt::format("  subgrids used {} of {}; visibilities per subgrid min {} mean {:.0f} max {}\n",
                   r.counts.subgrids_used.value_or(0), r.counts.subgrids, o.vis_per_subgrid_min,
                   o.vis_per_subgrid_mean, o.vis_per_subgrid_max);
  return s;
}

// memory: the model's estimates (with a recombination) and the measured peak

json memory_json(const Report& r) {
  const auto& m = r.memory;
  json j;
  if (has_recombination(r)) {
    j = {{"image_bytes", m.image_bytes},
         {"facet_bytes", m.facet_bytes},
         {"prepared_facet_bytes", m.prepared_facet_bytes},
         {"contribution_bytes", m.contribution_bytes},
         {"subgrid_bytes", m.subgrid_bytes},
         {"producer_bytes", m.producer_bytes},
         {"streamer_bytes", m.streamer_bytes},
         {"single_process_bytes", m.single_process_bytes}};
    if (m.assigner_bytes > 0) j["assigner_bytes"] = m.assigner_bytes;
    if (m.writer_bytes > 0) j["writer_bytes"] = m.writer_bytes;
    if (m.streamer_gpu_bytes > 0) j["streamer_gpu_bytes"] = m.streamer_gpu_bytes;
    if (!m.items.empty()) {
      json items = json::array();
      for (const auto& i : m.items)
        items.push_back({{"role", i.role}, {"name", i.name}, {"bytes", i.bytes}});
      j["items"] = items;
    }
  }
  if (m.peak_rss_bytes) j["peak_rss_bytes"] = *m.peak_rss_bytes;
  return j;
}

std::string memory_text(const Report& r) {
  const auto& m = r.memory;
  std::string s =
      fmt::format("  memory: image {}, facet {} (prepared {}), contribution {}, subgrid {}\n",
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
  // --device=cuda: what each streamer holds on its GPU, item by item.
  if (m.streamer_gpu_bytes > 0) {
    std::string items;
    for (const auto& i : m.items)
      if (i.role == "streamer GPU")
        items += fmt::format("{}{} {}", items.empty() ? "" : ", ", i.name, bytes_text(i.bytes));
    s += fmt::format("          per streamer on its GPU {}: {}\n", bytes_text(m.streamer_gpu_bytes),
                     items);
  }
  return s;
}

void memory_summary(const Report& r, Summary& out) {
  out.add("peak_rss_bytes", optional_cell(r.memory.peak_rss_bytes));
}

// sky

json to_json(const Sky& s) {
  return {{"pixel_lm", s.pixel_lm}, {"sources", s.sources}};
}

// device: where the streamers degrid and grid

json to_json(const Device& d) {
  json j = {{"kind", d.kind}};
  if (!d.cuda()) return j;
  json gpus = json::array();
  for (const auto& g : d.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"driver", g.driver},
                    {"memory_bytes", g.memory_bytes},
                    {"fp64_flops_per_s", g.fp64_flops_per_s},
                    {"memory_bytes_per_s", g.memory_bytes_per_s}});
  j["gpus"] = gpus;
  j["kernel_s"] = number_or_null(d.kernel_s);
  j["transfer_s"] = number_or_null(d.transfer_s);
  j["host_wait_s"] = number_or_null(d.host_wait_s);
  return j;
}

std::string render_text(const Device& d, const Report&) {
  if (!d.cuda()) return {};
  std::string gpus;
  for (const auto& g : d.gpus)
    gpus += fmt::format("{}GPU {} {} ({}, {})", gpus.empty() ? "" : "; ", g.index, g.name,
                        bytes_text(g.memory_bytes), g.driver);
  std::string s = gpus.empty() ? "  device: cuda\n" : fmt::format("  device: cuda, {}\n", gpus);
  const auto seconds = [](double v) {
    return std::isfinite(v) ? fmt::format("{:.3f} s", v) : std::string("-");
  };
  if (std::isfinite(d.kernel_s) || std::isfinite(d.transfer_s) || std::isfinite(d.host_wait_s))
    s += fmt::format("  GPU time over the streamers: kernels {}, transfers {}, host waits {}\n",
                     seconds(d.kernel_s), seconds(d.transfer_s), seconds(d.host_wait_s));
  return s;
}

std::string bound_text(const std::string& bound, const Report& r) {
  if (!r.device || !r.device->cuda()) return bound;
  // Pipeline::bound names the resource, Transit::bound the side.
  if (bound == "storage" || bound == "network") return bound + " (it holds back the GPU streamers)";
  if (bound == "writers") return bound + ": storage holds back the GPU streamers";
  if (bound == "transfer") return bound + ": the network holds back the GPU streamers";
  return bound;
}

// environment: every report's last lines

namespace {

// A layout's size for people: 4194304 -> "4 MiB", 65536 -> "64 KiB".
std::string layout_size_text(index_t bytes) {
  constexpr std::pair<int, const char*> kUnits[] = {{30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const auto& [shift, unit] : kUnits)
    if (bytes >= (index_t{1} << shift) && bytes % (index_t{1} << shift) == 0)
      return fmt::format("{} {}", bytes >> shift, unit);
  return fmt::format("{} B", bytes);
}

json layout_json(const FileLayout& l) {
  return {{"object_size", l.object_size},
          {"stripe_unit", l.stripe_unit},
          {"stripe_count", l.stripe_count},
          {"pool", l.pool}};
}

json file_system_json(const Environment::FileSystem& f) {
  json j = {{"path", f.path}, {"mount_point", f.mount_point},
            {"type", f.type}, {"options", f.options},
            {"name", f.name}, {"client", f.client}};
  if (f.name != "ceph") return j;
  j["layout"] = f.layout ? layout_json(*f.layout) : json(nullptr);
  j["replication"] = f.replication ? json(*f.replication) : json(nullptr);
  if (!f.replication) j["replication_unknown_why"] = f.replication_unknown_why;
  return j;
}

// "  /x/out%d.h5 on ceph through FUSE (fuse.ceph-fuse: rw,...; mounted at
// /x): pool cephfs_data, 2 replicas; layout 4 MiB objects, ..."
std::string file_system_text(const Environment::FileSystem& f) {
  std::string s = fmt::format("  {} on {} through {} ({}: {}; mounted at {})", f.path, f.name,
                              f.client == "fuse" ? "FUSE" : "the kernel's client", f.type,
                              f.options, f.mount_point);
  if (f.name != "ceph") return s + "\n";
  const auto& l = f.layout;
  s += fmt::format(": pool {}, {}", l ? l->pool : std::string("unknown"),
                   f.replication
                       ? fmt::format("{} replica{}", *f.replication, *f.replication == 1 ? "" : "s")
                       : "replicas unknown (" + f.replication_unknown_why + ")");
  if (!l) return s + "; layout unknown\n";
  return s + fmt::format("; layout {} objects, stripe unit {}, {} stripe{}\n",
                         layout_size_text(l->object_size), layout_size_text(l->stripe_unit),
                         l->stripe_count, l->stripe_count == 1 ? "" : "s");
}

}  // namespace

json to_json(const Environment& e) {
  json j = {{"iotest_version", e.iotest_version}, {"git_revision", e.git_revision},
            {"build_arch", e.build_arch},         {"configuration", e.configuration},
            {"hdf5_version", e.hdf5_version},     {"mpi_version", e.mpi_version},
            {"fftw_version", e.fftw_version},     {"date", e.date},
            {"command_line", e.command_line},     {"hosts", e.hosts}};
  if (e.output) j["output_file_system"] = file_system_json(*e.output);
  return j;
}

std::string render_text(const Environment& e, const Report&) {
  std::string hosts;
  for (const auto& h : e.hosts) hosts += (hosts.empty() ? "" : ", ") + h;
  std::string s = fmt::format("  iotest {} ({}, built for {}) on {}, {}; HDF5 {}, {}, {}\n",
                              e.iotest_version, e.git_revision, e.build_arch, hosts, e.date,
                              e.hdf5_version, e.mpi_version, e.fftw_version);
  if (e.output) s += file_system_text(*e.output);
  return s;
}

void summarise(const Environment* e, Summary& out) {
  std::string hosts;
  if (e)
    for (const auto& h : e->hosts) hosts += (hosts.empty() ? "" : " ") + h;
  out.add("date", e, &Environment::date);
  out.add("iotest_version", e, &Environment::iotest_version);
  out.add("git_revision", e, &Environment::git_revision);
  out.add("build_arch", e, &Environment::build_arch);
  out.add("hosts", hosts);
}

}  // namespace iotest::report::detail
