// A job: what `plan`, `degrid` and `run` compute, resolved once from the
// options: the recombination set, the observation and its grid geometry,
// the w layout and kernels that shape the subgrids, and the sky. Below both
// the commands and the pipeline (no MPI here), so every command sizes and
// runs the same job the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/device/device.hpp"
#include "iotest/report/report.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/storage/backend.hpp"
#include "iotest/storage/registry.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::job {

struct JobOptions {
  std::string rec_set;
  std::optional<double> window_width;                        // override the set's W
  std::optional<telescope::ObservationOptions> observation;  // with --vis-set
  degrid::DegridOptions kernel;
  std::optional<index_t> margin;
  std::optional<double> target_err;
  index_t source_count = 10;  // 0: an all-zero sky (nothing to check)
  std::uint64_t seed = 1;
  // Whether autocorrelations make runs (binning::RunSplit::autocorrelations):
  // predict writes every row; the imaging direction leaves them out of the
  // image unless --image-autocorrelations (docs/imaging.md, "Autocorrelations").
  bool bin_autocorrelations = true;
};

struct Job {
  config::RecombinationParams p;  // with the margin degridding needs
  std::optional<telescope::Observation> obs;
  std::optional<binning::GridGeometry> geometry;  // with obs
  degrid::WLayout w;                              // with obs
  degrid::DegridOptions kernel;
  std::optional<double> target_err;
  std::vector<sky::PointSource> sources;
  bool bin_autocorrelations = true;  // JobOptions'
  // The split the binning uses: at frequency chunks and w-stacking planes,
  // autocorrelations as the job takes them.
  binning::RunSplit split() const { return {true, w.stack_step, bin_autocorrelations}; }
};

// Throws UsageError naming the option at fault.
Job resolve(const JobOptions& options);
// The job part of a command's options (`degrid`, `run`: the same fields).
template <class Options>
JobOptions job_options(const Options& o) {
  JobOptions j;
  j.rec_set = o.rec_set;
  j.observation = o.observation;
  j.kernel = o.kernel;
  j.margin = o.margin;
  j.target_err = o.target_err;
  j.source_count = o.source_count;
  j.seed = o.seed;
  return j;
}

// --target-err: measures the tower height this margin allows (needs the
// recombination's plans) and sets it, and the stacking step, in job.w.
degrid::TowerCalibration calibrate_w_layout(Job& job, const swiftly::Recombination& rec);
// Sets a measured tower height, and the stacking step it gives, in job.w.
void use_tower_height(Job& job, double height);

// Usage errors shared by the commands: the source count must fit the used
// image, and an estimate this machine's memory.
void require_source_count(const config::RecombinationParams& p, index_t source_count);
void require_memory(const config::RecombinationParams& p, index_t bytes);

// --device. parse_device: "cpu" or "cuda" (UsageError naming --device
// otherwise). require_device: what --device=cuda needs here, a build with
// the CUDA path and a GPU this process sees; else UsageError "--device:
// cuda: <what is missing>" (device::Probe::missing). Returns the GPUs
// (none for the CPU).
device::Kind parse_device(const std::string& text);
std::vector<device::GpuInfo> require_device(device::Kind kind);
// The one place a command (run) stops where the GPU
// streamer is not wired in yet: a UsageError naming --device. Reached
// only with --device=cuda on a build with CUDA and a usable GPU, after the
// GPU memory check.
// The report's device section: the kind and, for CUDA, the GPUs used.
report::Device device_section(device::Kind kind, const std::vector<device::GpuInfo>& gpus);

// Report sections from a job. The observation alone (no grid: that needs
// a recombination):
report::Observation observation_section(const telescope::Observation& obs);
// With the grid and the distribution of visibilities over subgrids:
void add_observation(report::Report& r, const telescope::Observation& obs,
                     const binning::GridGeometry& g, const binning::Distribution& d);
// An imaging job's rule in its observation section (after add_observation):
// whether the observation's autocorrelations went into the dirty image,
// and the rows its binning grids (Binner::visibility_count).
void add_imaging_rule(report::Report& r, const Job& job, const binning::Binner& binner);
void describe_degridding(report::RunSettings& s, const Job& job, const degrid::Degridder& d,
                         index_t w_stacks,
                         const std::optional<degrid::TowerCalibration>& calibration);
// What the job's visibility files record of it: the sky, and what
// rebuilds its binning (for `verify`).
storage::Provenance provenance(const Job& job, const std::string& rec_set, std::uint64_t seed,
                               bool synthetic, std::uint32_t nonce);

// A job over a predict run's files (`iotest grid`, the imaging direction):
// their provenance gives the observation and the sky. An observation
// option given as well must agree with it (UsageError naming the option);
// a stonewalled set is refused, since a dirty image needs every visibility.
void use_files_observation(JobOptions& j, const storage::Provenance& pv, const std::string& path);

// Outputs split by frequency (ms) each hold at least one frequency chunk:
// UsageError otherwise, naming --writer-ranks (outputs in transit) or
// --writer-count. `run` refuses such a job and `plan` writes no script
// for it, with this one line.
void require_frequency_chunk_per_output(index_t outputs, index_t freq_chunks,
                                        const std::string& backend, bool writer_ranks);

// The back-end stores chunks of the observation's time chunk (msv4: a
// zarr chunk of one baseline's time range, so the chunk must divide the
// steps): UsageError naming --time otherwise. `run` and `plan` refuse such a job alike.
void require_storable_time_chunk(const storage::StorageChoice& storage,
                                 const telescope::Observation& obs);

// The sky, so other tools can predict the same visibilities (nothing above
// 10,000 sources).
std::optional<report::Sky> sky_of(const std::vector<sky::PointSource>& sources, double pixel_lm);

}  // namespace iotest::job
