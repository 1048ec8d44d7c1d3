#include "iotest/job/job.hpp"

#include <fmt/format.h>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"

namespace iotest::job {
namespace {

degrid::WLayout check_degrid_options(const config::RecombinationParams& p0,
                                     const telescope::Observation& obs,
                                     const binning::GridGeometry& g,
                                     const degrid::DegridOptions& kernel,
                                     std::optional<index_t> margin,
                                     std::optional<double> target_err) {
  if (kernel.support < 2 || kernel.support > degrid::kMaxSupport || kernel.support % 2)
    throw UsageError("--support", fmt::format("expected an even kernel width from 2 to {}, got {}",
                                              degrid::kMaxSupport, kernel.support));
  if (kernel.w_support < 2 || kernel.w_support > degrid::kMaxSupport || kernel.w_support % 2)
    throw UsageError("--w-support",
                     fmt::format("expected an even w kernel width from 2 to {}, got {}",
                                 degrid::kMaxSupport, kernel.w_support));
  auto w = degrid::w_layout(g, obs, p0.xA, kernel, margin);
  if (target_err && kernel.w_step)
    throw UsageError("--target-err", "give either --target-err or --wstep, not both");
  if (w.margin >= p0.xA - p0.subgrid_granularity)
    throw UsageError(margin          ? "--margin"
                     : kernel.w_step ? "--wstep"
                                     : "--rec-set",
                     fmt::format("{} with {}: the subgrids ({} cells) cannot hold the kernel and "
                                 "the w-tower spread (margin {} cells); use larger subgrids",
                                 p0.canonical, obs.vis_set, p0.xA, w.margin));
  return w;
}

}  // namespace

Job resolve(const JobOptions& o) {
  if (o.rec_set.empty()) throw UsageError("--rec-set", "expected a recombination set");
  Job job;
  job.kernel = o.kernel;
  job.target_err = o.target_err;
  job.bin_autocorrelations = o.bin_autocorrelations;
  const auto p0 = config::resolve_rec_set(o.rec_set, {o.window_width, 0});
  if (o.observation) {
    job.obs = telescope::make_observation(*o.observation);
    job.geometry = binning::grid_geometry(p0, *job.obs);
    job.w = check_degrid_options(p0, *job.obs, *job.geometry, o.kernel, o.margin, o.target_err);
    job.p = config::resolve_rec_set(o.rec_set, {o.window_width, job.w.margin});
  } else {
    job.p = p0;
  }
  if (o.source_count != 0) require_source_count(job.p, o.source_count);
  job.sources = sky::random_sources(o.source_count, job.p.used_size, o.seed);
  return job;
}

degrid::TowerCalibration calibrate_w_layout(Job& job, const swiftly::Recombination& rec) {
  // Measure the tower height this margin allows instead of bounding it.
  auto single = job.w;
  single.stack_step = 0;
  const auto calibration = degrid::calibrate_tower_height(
      degrid::Degridder(rec, *job.geometry, *job.obs, job.kernel, single), job.w.w_max,
      *job.target_err);
  use_tower_height(job, calibration.height);
  return calibration;
}

void use_tower_height(Job& job, double height) {
  job.w.tower_half_height = height;
  job.w.stack_step = height >= job.w.w_max ? 0 : 2 * height;
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

device::Kind parse_device(const std::string& text) {
  if (text == "cpu") return device::Kind::cpu;
  if (text == "cuda") return device::Kind::cuda;
  throw UsageError("--device", "expected cpu or cuda, got '" + text + "'");
}

std::vector<device::GpuInfo> require_device(device::Kind kind) {
  if (kind != device::Kind::cuda) return {};
  auto probe = device::probe();
  if (!device::built_with_cuda() || probe.gpus.empty())
    throw UsageError("--device", "cuda: " + (probe.missing.empty() ? std::string("no CUDA device")
                                                                   : probe.missing));
  return std::move(probe.gpus);
}

report::Device device_section(device::Kind kind, const std::vector<device::GpuInfo>& gpus) {
  report::Device d;
  d.kind = std::string(device::name(kind));
  if (kind == device::Kind::cuda)
    for (const auto& g : gpus)
      d.gpus.push_back(
          {g.index, g.name, g.driver, g.memory_bytes, g.fp64_flops_per_s, g.memory_bytes_per_s});
  return d;
}

report::Observation observation_section(const telescope::Observation& obs) {
  report::Observation o;
  o.vis_set = obs.vis_set;
  o.description = obs.description;
  o.antennas = obs.antenna_count();
  o.autocorrelations = obs.autocorrelations;
  o.time = obs.time.text();
  o.freq = obs.freq.text();
  o.time_chunks = obs.time.chunks();
  o.freq_chunks = obs.freq.chunks();
  o.dec_deg = obs.dec_deg;
  o.visibility_bytes = obs.visibility_bytes();
  return o;
}

void add_observation(report::Report& r, const telescope::Observation& obs,
                     const binning::GridGeometry& g, const binning::Distribution& d) {
  r.counts.baselines = obs.baseline_count();
  r.counts.visibilities = obs.visibility_count();
  r.counts.subgrids_used = d.subgrids_used;
  report::Observation o = observation_section(obs);
  o.max_uv = g.max_uv;
  o.pixel_lm = g.pixel_lm;
  o.cell_uv = g.cell_uv;
  o.field_lm = g.field_lm;
  o.vis_per_subgrid_min = d.min;
  o.vis_per_subgrid_mean = d.mean;
  o.vis_per_subgrid_max = d.max;
  r.observation = o;
}

void add_imaging_rule(report::Report& r, const Job& job, const binning::Binner& binner) {
  if (!r.observation || !job.obs) return;
  r.observation->autocorrelations_imaged = job.obs->autocorrelations && job.bin_autocorrelations;
  r.observation->visibilities_imaged = binner.visibility_count();
}

void describe_degridding(report::RunSettings& s, const Job& job, const degrid::Degridder& d,
                         index_t w_stacks,
                         const std::optional<degrid::TowerCalibration>& calibration) {
  s.support = job.kernel.support;
  s.w_support = job.kernel.w_support;
  s.w_free = job.w.w_free();
  s.w_step = d.planes().dw;
  s.w_stack_step = job.w.stack_step;
  s.w_stacks = w_stacks;
  s.tower_half_height = job.w.tower_half_height;
  if (calibration) {
    s.target_err = calibration->target;
    s.tower_error_at_zero = calibration->error_at_zero;
  }
}

storage::Provenance provenance(const Job& job, const std::string& rec_set, std::uint64_t seed,
                               bool synthetic, std::uint32_t nonce) {
  storage::Provenance pv;
  pv.rec_set = rec_set;
  pv.pixel_lm = job.geometry->pixel_lm;
  pv.source_count = synthetic ? 0 : static_cast<index_t>(job.sources.size());
  pv.seed = seed;
  pv.synthetic = synthetic;
  if (synthetic) pv.vis_units = "uncalib";
  const auto& obs = *job.obs;
  pv.observation = {obs.vis_set, obs.time.text(), obs.freq.text(), obs.dec_deg};
  pv.margin = job.w.margin;
  pv.w_stack_step = job.w.stack_step;
  pv.nonce = nonce;
  return pv;
}

void require_frequency_chunk_per_output(index_t outputs, index_t freq_chunks,
                                        const std::string& backend, bool writer_ranks) {
  if (outputs <= freq_chunks) return;
  throw UsageError(writer_ranks ? "--writer-ranks" : "--writer-count",
                   fmt::format("{} {} outputs each hold a range of frequency chunks, and the "
                               "observation has {}: expected at most that many outputs in all "
                               "(fewer streamers, writer ranks or --writer-count, or more "
                               "frequency chunks)",
                               outputs, backend, freq_chunks));
}

void require_storable_time_chunk(const storage::StorageChoice& storage,
                                 const telescope::Observation& obs) {
  if (!storage.spec || !storage.spec->time_chunk_problem) return;
  const auto problem = storage.spec->time_chunk_problem(obs.time.steps, obs.time.chunk);
  if (!problem.empty()) throw UsageError("--time", problem);
}

void use_files_observation(JobOptions& j, const storage::Provenance& pv, const std::string& path) {
  if (pv.stonewalled)
    throw UsageError(path,
                     "holds part of its observation (a stonewalled run): the dirty image "
                     "needs every visibility");
  const auto& mine = pv.observation;
  if (j.observation) {
    const auto& given = *j.observation;
    const auto disagree = [&](const char* option, const std::string& got, const std::string& want) {
      throw UsageError(
          option, fmt::format("expected the input files' {} ({}), got {}", option + 2, want, got));
    };
    if (!given.vis_set.empty() && given.vis_set != mine.vis_set)
      disagree("--vis-set", given.vis_set, mine.vis_set);
    // Compared as parsed, so that equal samplings written differently agree.
    const auto sampling = [](const std::optional<std::string>& text, const std::string& option) {
      return text ? telescope::parse_sampling(*text, option, false).text() : std::string();
    };
    if (given.time && sampling(given.time, "--time") != sampling(mine.time, "--time"))
      disagree("--time", *given.time, mine.time.value_or(""));
    if (given.freq && sampling(given.freq, "--freq") != sampling(mine.freq, "--freq"))
      disagree("--freq", *given.freq, mine.freq.value_or(""));
    if (given.dec_deg && *given.dec_deg != mine.dec_deg.value_or(0))
      disagree("--dec", fmt::format("{}", *given.dec_deg),
               fmt::format("{}", mine.dec_deg.value_or(0)));
  }
  j.observation = mine;
  j.source_count = pv.source_count;
  j.seed = pv.seed;
}

std::optional<report::Sky> sky_of(const std::vector<sky::PointSource>& sources, double pixel_lm) {
  if (sources.size() > 10000) return std::nullopt;
  report::Sky sky{pixel_lm, {}};
  for (const auto& src : sources) sky.sources.push_back({src.y0, src.y1});
  return sky;
}

}  // namespace iotest::job
