// The run's report on rank 0: planned before the start, then filled with
// every rank's figures (RoleFigures and report::RankFigures), sent as one
// block of bytes each and added up once (RoleFigures::add).
#include "iotest/pipeline/run_report.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "iotest/common/mpi_wait.hpp"
#include "iotest/common/system.hpp"
#include "iotest/image/image_file.hpp"

namespace iotest::pipeline {

void RoleFigures::add(const RoleFigures& o) {
  subgrid_error.add(o.subgrid_error);
  vis_error.add(o.vis_error);
  subgrid_error_worst = std::max(subgrid_error_worst, o.subgrid_error_worst);
  subgrids_checked += o.subgrids_checked;
  vis_checked += o.vis_checked;
  visibilities_written += o.visibilities_written;
  parts_done += o.parts_done;
  tasks_skipped += o.tasks_skipped;
  walk_end = std::max(walk_end, o.walk_end);
  read.add(o.read);
  values_checked += o.values_checked;
  values_wrong += o.values_wrong;
  input_s = std::max(input_s, o.input_s);
  check_s = std::max(check_s, o.check_s);
  degrid_s = std::max(degrid_s, o.degrid_s);
  observed2 += o.observed2;
  residual2 += o.residual2;
  grid_s = std::max(grid_s, o.grid_s);
  queue_wait_s = std::max(queue_wait_s, o.queue_wait_s);
  transit_chunks += o.transit_chunks;
  transit_bytes += o.transit_bytes;
  transit_kept_chunks += o.transit_kept_chunks;
  send_wait_s = std::max(send_wait_s, o.send_wait_s);
  transit_idle_s = std::max(transit_idle_s, o.transit_idle_s);
  gpu.kernel_s += o.gpu.kernel_s;
  gpu.transfer_s += o.gpu.transfer_s;
  gpu.host_wait_s += o.gpu.host_wait_s;
}

namespace {

Wire to_wire(const RankResult& r, int rank, int role) {
  Wire w;
  static_cast<RoleFigures&>(w) = r;
  w.figures = r.stats;
  w.figures.peak_rss_bytes = peak_rss_bytes();
  w.rank = rank;
  w.role = role;
  ::gethostname(w.host, sizeof(w.host) - 1);
  return w;
}

// Every rank's time series on rank 0 (elsewhere: nothing).
std::vector<std::vector<TimeSample>> gather_samples(const std::vector<TimeSample>& mine,
                                                    MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  static_assert(std::is_trivially_copyable_v<TimeSample>);
  const int bytes = static_cast<int>(mine.size() * sizeof(TimeSample));
  std::vector<int> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Gather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  for (int i = 1; i < size; ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  std::vector<TimeSample> all(
      rank == 0 ? static_cast<size_t>(offsets.back() + counts.back()) / sizeof(TimeSample) : 0);
  MPI_Gatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, 0,
              comm);
  std::vector<std::vector<TimeSample>> out;
  for (int i = 0; rank == 0 && i < size; ++i) {
    const auto* first = all.data() + offsets[i] / static_cast<int>(sizeof(TimeSample));
    out.emplace_back(first, first + counts[i] / static_cast<int>(sizeof(TimeSample)));
  }
  return out;
}

// The time line on a common grid of intervals (widened to keep it within
// TimeSeries::kMaxSamples intervals); roles that keep no series are left out.
report::Timeline timeline_of(const std::vector<Wire>& all,
                             const std::vector<std::vector<TimeSample>>& samples,
                             double interval_s) {
  double end = 0;
  for (const auto& s : samples)
    if (!s.empty()) end = std::max(end, s.back().t);
  const double needed = end / static_cast<double>(TimeSeries::kMaxSamples);
  while (interval_s < needed) interval_s *= 2;
  report::Timeline t;
  t.interval_s = interval_s;
  for (size_t i = 0; i < all.size(); ++i) {
    if (samples[i].size() < 2) continue;
    const auto f = per_interval(samples[i], interval_s);
    t.ranks.push_back({all[i].rank, kRoleNames[all[i].role], all[i].host, f.busy_s, f.wait_s,
                       f.visibilities, f.bytes_sent, f.bytes_written});
  }
  return t;
}

// In situ or in transit: both sides' waits, what bound the run and the
// writer ranks that would keep pace with the streamers (report::Transit).
report::Transit transit_figures(const std::vector<Wire>& all, const Context& ctx,
                                double stream_s) {
  const auto& o = ctx.options;
  const auto& roles = ctx.roles;
  const int threads = ctx.threads;
  report::Transit t;
  t.placement = roles.writers > 0 ? "in transit" : "in situ";
  t.files_split_by = ctx.split().by_frequency() ? "frequency" : "row chunk";
  t.writer_ranks = roles.writers;
  t.writers_per_rank = o.writer_count;
  t.transit_queue = roles.writers > 0 || ctx.exchanges_chunks() ? o.transit_queue : 0;
  double compute = 0, written = 0, writing_s = 0;
  for (const auto& w : all) {
    const auto& f = w.figures;
    written += static_cast<double>(f.bytes_written);
    writing_s += f.write_s + f.sync_s;
    if (w.role == 1) {
      t.chunks_sent += w.transit_chunks;
      t.bytes_sent += w.transit_bytes;
      t.chunks_kept += w.transit_kept_chunks;
      t.streamer_queue_wait_s = std::max(t.streamer_queue_wait_s, w.queue_wait_s);
      t.send_wait_s = std::max(t.send_wait_s, w.send_wait_s);
      // What it made while writing did not hold it. The waits are its
      // threads' (thread-seconds: GPU streamers' threads mostly wait).
      compute += static_cast<double>(f.visibilities) * static_cast<double>(sizeof(cplx)) /
                 std::max(1e-3 * stream_s, stream_s - w.queue_wait_s / std::max(1, threads));
    } else if (w.role == 3) {
      t.writer_idle_s = std::max(t.writer_idle_s, w.transit_idle_s);
      t.writer_queue_wait_s = std::max(t.writer_queue_wait_s, w.queue_wait_s);
    }
  }
  t.bytes_per_s = static_cast<double>(t.bytes_sent) / std::max(1e-9, stream_s);
  t.compute_bytes_per_s = compute / std::max(1, roles.streamers);
  t.write_bytes_per_s = writing_s > 0 ? written / writing_s : 0;
  // Degridding held by full queues for a tenth of the run: the writing
  // side set the pace; in transit, if the writer ranks mostly waited for
  // messages meanwhile, the transfer itself did (messages too few in
  // flight for the latency, or a slow network).
  if (t.streamer_queue_wait_s <= 0.1 * stream_s)
    t.bound = "streamers";
  else if (roles.writers > 0 && t.writer_idle_s > 0.5 * stream_s)
    t.bound = "transfer";
  else
    t.bound = "writers";
  t.suggested_writer_ranks = report::writer_ranks_for(roles.streamers, t.compute_bytes_per_s,
                                                      t.write_bytes_per_s, o.writer_count);
  return t;
}

report::RankStats from_wire(const Wire& w) {
  report::RankStats s;
  static_cast<report::RankFigures&>(s) = w.figures;
  s.rank = w.rank;
  s.role = kRoleNames[w.role];
  s.host = w.host;
  if (w.role == 1) s.queue_wait_s = w.queue_wait_s;
  return s;
}

// What each rank sent to and received from each host, with the seconds in
// flight (report::PeerTraffic), on rank 0. The producers know their sends
// per destination rank; one all-to-all tells each rank what it received
// from each, then each rank adds them up by host and rank 0 gathers a
// fixed row per host from every rank (6 figures x hosts x ranks).
std::vector<report::PeerTraffic> gather_peers(const RankResult& mine, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  constexpr int kName = 64;
  std::vector<char> names(static_cast<size_t>(size * kName));
  char host[kName] = {};
  ::gethostname(host, kName - 1);
  MPI_Request request;
  MPI_Iallgather(host, kName, MPI_CHAR, names.data(), kName, MPI_CHAR, comm, &request);
  wait_for(request);
  std::vector<std::string> host_of(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i)
    host_of[static_cast<size_t>(i)] = std::string(&names[static_cast<size_t>(i * kName)]);
  std::vector<std::string> hosts = host_of;
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  const auto index_of = [&](int r) {
    return static_cast<size_t>(std::lower_bound(hosts.begin(), hosts.end(),
                                                host_of[static_cast<size_t>(r)]) -
                               hosts.begin());
  };
  // Per destination rank: messages, bytes, seconds in flight.
  std::vector<double> sent(static_cast<size_t>(3 * size)), received(sent.size());
  for (size_t d = 0; d < mine.sent_to.size() && d < static_cast<size_t>(size); ++d) {
    sent[3 * d] = mine.sent_to[d].messages;
    sent[3 * d + 1] = mine.sent_to[d].bytes;
    sent[3 * d + 2] = mine.sent_to[d].in_flight_s;
  }
  MPI_Ialltoall(sent.data(), 3, MPI_DOUBLE, received.data(), 3, MPI_DOUBLE, comm, &request);
  wait_for(request);
  // Per host: messages sent, received; bytes sent, received; seconds sent, received.
  constexpr size_t kFigures = 6;
  const size_t h = hosts.size();
  std::vector<double> row(kFigures * h);
  for (int r = 0; r < size; ++r) {
    const size_t at = kFigures * index_of(r), k = 3 * static_cast<size_t>(r);
    for (size_t f = 0; f < 3; ++f) {
      row[at + 2 * f] += sent[k + f];
      row[at + 2 * f + 1] += received[k + f];
    }
  }
  std::vector<double> all(rank == 0 ? row.size() * static_cast<size_t>(size) : 0);
  MPI_Igather(row.data(), static_cast<int>(row.size()), MPI_DOUBLE, all.data(),
              static_cast<int>(row.size()), MPI_DOUBLE, 0, comm, &request);
  wait_for(request);
  std::vector<report::PeerTraffic> peers;
  for (int r = 0; rank == 0 && r < size; ++r)
    for (size_t j = 0; j < h; ++j) {
      const double* f = &all[(static_cast<size_t>(r) * h + j) * kFigures];
      if (f[0] == 0 && f[1] == 0) continue;  // nothing either way
      peers.push_back({r, hosts[j], static_cast<index_t>(f[0]), static_cast<index_t>(f[1]),
                       static_cast<index_t>(f[2]), static_cast<index_t>(f[3]), f[4], f[5]});
    }
  return peers;
}

// The imaging direction's check: the sampled pixels' direct sums (from
// the streamers) and image values (from the producers holding them),
// summed on rank 0.
std::vector<cplx> pixel_sums(const Context& ctx, const RankResult& mine, MPI_Comm comm) {
  const auto& roles = ctx.roles;
  const index_t n = static_cast<index_t>(ctx.pixels.size());
  std::vector<cplx> sums(static_cast<size_t>(2 * n));
  if (n == 0) return sums;
  for (index_t i = 0; i < n && !mine.dirty_sums.empty(); ++i)
    sums[static_cast<size_t>(i)] = mine.dirty_sums[static_cast<size_t>(i)];
  for (index_t i = 0; i < n && roles.is_producer(); ++i) {
    const auto& px = ctx.pixels[static_cast<size_t>(i)];
    const auto at = swiftly::locate_pixel(ctx.facet_tiles, ctx.job.p.yB, px.y0, px.y1);
    if (at.facet < 0) throw std::logic_error("a sampled pixel outside every facet");
    if (roles.facet_owner(at.facet) == roles.rank)
      sums[static_cast<size_t>(n + i)] =
          ctx.image_facets[static_cast<size_t>(at.facet / roles.producers)](at.a, at.b);
  }
  MPI_Request request;
  MPI_Ireduce(roles.rank == 0 ? MPI_IN_PLACE : sums.data(), sums.data(),
              static_cast<int>(sums.size()), MPI_C_DOUBLE_COMPLEX, MPI_SUM, 0, comm, &request);
  wait_for(request);
  return sums;
}

report::Pipeline pipeline_section(const Context& ctx) {
  const auto& o = ctx.options;
  const auto& roles = ctx.roles;
  report::Pipeline pl;
  pl.ranks = roles.size;
  pl.producers = roles.producers;
  pl.streamers = roles.streamers;
  pl.assigner = roles.assigner_rank >= 0;
  pl.threads = ctx.threads;
  pl.producer_threads = ctx.producer_threads;
  pl.writers_per_streamer = ctx.job.obs && !ctx.imaging() ? o.writer_count : 0;
  pl.writer_ranks = roles.writers;
  pl.fork_writer = o.fork_writer;
  pl.synthetic_vis = o.synthetic_vis;
  pl.synthetic_order = !o.synthetic_vis ? "" : o.synthetic_sequential ? "sequential" : "walk";
  pl.network_only = o.network_only;
  pl.send_queue = o.send_queue;
  pl.subgrid_queue = o.subgrid_queue;
  pl.task_queue = o.task_queue;
  pl.bls_per_task = o.bls_per_task;
  pl.visibility_queue = *o.visibility_queue;
  pl.subgrid_visits = static_cast<index_t>(ctx.plan.visits.size());
  pl.subgrid_parts = static_cast<index_t>(ctx.plan.parts.size());
  return pl;
}

// Every rank's figures added up (rank 0), for the report.
struct Totals : RoleFigures {
  index_t sent = 0, received = 0;  // contributions, both ways (not the assigner's grants)
  index_t bytes_written = 0, chunks_written = 0, chunks_rewritten = 0, subgrids = 0,
          visibilities = 0, planes = 0;
  double write_s = 0, sync_s = 0, open_s = 0, producer_wait = 0, streamer_wait = 0;
  double read_s_max = 0;  // the longest a streamer spent reading
};

// Adds up the ranks' figures, and fills the per-rank table, the slowest
// rank and (imaging over files) what each streamer read.
Totals add_up(const std::vector<Wire>& all, const RunOptions& o, report::Report& r,
              report::Reading& reading) {
  Totals t;
  double busiest = -1;
  for (const auto& w : all) {
    const auto& f = w.figures;
    r.pipeline->per_rank.push_back(from_wire(w));
    t.add(w);
    t.read_s_max = std::max(t.read_s_max, w.read.seconds);
    // Contributions, both ways (not the assigner's grants).
    t.sent += w.role < 2 ? f.bytes_sent : 0;
    t.received += w.role < 2 ? f.bytes_received : 0;
    t.bytes_written += f.bytes_written;
    t.chunks_written += f.chunks_written;
    t.chunks_rewritten += f.chunks_rewritten;
    t.subgrids += w.role == 1 ? f.subgrids : 0;
    t.visibilities += f.visibilities;
    t.planes += f.w_planes;
    t.write_s = std::max(t.write_s, f.write_s);
    t.sync_s = std::max(t.sync_s, f.sync_s);
    t.open_s = std::max(t.open_s, f.open_s);
    if (w.role == 1 && !o.inputs.empty())
      reading.per_rank.push_back({w.rank, w.host, static_cast<index_t>(o.inputs.size()),
                                  w.read.chunks, w.read.bytes, 0.0, w.read.seconds});
    if (w.role == 0) t.producer_wait = std::max(t.producer_wait, f.wait_s);
    if (w.role == 1) t.streamer_wait = std::max(t.streamer_wait, f.wait_s);
    if (f.busy_s > busiest) {
      busiest = f.busy_s;
      r.pipeline->slowest_rank = w.rank;
    }
  }
  reading.values_checked += t.values_checked;
  reading.values_wrong += t.values_wrong;
  return t;
}

// What bound the run: whoever waited least while the others waited on it.
// Storage first: streamers held by full writer queues wait too, and with
// the producers waiting on them that would read as the network.
std::string bound_of(const Context& ctx, const Totals& t, double stream_s) {
  const auto& o = ctx.options;
  const double share = 0.25 * stream_s;
  if (o.network_only) return "network";
  if (t.write_s + t.sync_s > 0.5 * stream_s || t.read_s_max > 0.5 * stream_s) return "storage";
  if (t.producer_wait > share && t.streamer_wait > share) return "network";
  // Nothing computed: the streamers' walk and chunk assembly.
  if (o.synthetic_vis) return "chunk assembly";
  if (t.producer_wait >= t.streamer_wait && ctx.roles.streamers > 0)
    return ctx.imaging() ? "gridding" : ctx.job.obs ? "degridding" : "subgrid assembly";
  return "producers";
}

// The imaging direction: the sampled pixels against their direct sums, and
// over files what was read.
void imaging_results(const Context& ctx, const Setup& st, const Totals& t, const Outcome& out,
                     report::Reading& reading, report::Report& r, report::Accuracy& accuracy) {
  const auto& o = ctx.options;
  const index_t n = static_cast<index_t>(ctx.pixels.size());
  RelativeError pixel_error;
  for (index_t i = 0; i < n; ++i)
    pixel_error.add(CView2D(&out.pixel_sums[static_cast<size_t>(n + i)], 1, 1),
                    CView2D(&out.pixel_sums[static_cast<size_t>(i)], 1, 1));
  accuracy = {};
  accuracy.facet_rmse = pixel_error.value();
  accuracy.pixel_samples = n;
  if (ctx.both()) accuracy.residual_rms = std::sqrt(t.residual2 / t.observed2);
  if (t.visibilities != ctx.binner->visibility_count())
    throw std::logic_error(fmt::format("gridded {} visibilities of {}", t.visibilities,
                                       ctx.binner->visibility_count()));
  if (o.inputs.empty()) return;
  reading.backend = st.input_backend;
  reading.ranks = ctx.roles.streamers;
  reading.direct = st.input_direct;
  reading.chunks = t.read.chunks;
  reading.bytes = t.read.bytes;
  reading.open_s = st.inputs_open_s;
  reading.read_s = t.read.seconds;
  reading.wall_s = out.stream_s;
  reading.bytes_per_s = static_cast<double>(t.read.bytes) / out.stream_s;
  reading.chunks_reread = t.read.chunks - st.chunks_stored;
  reading.chunks_stored = st.chunks_stored;
  // Storage only: every value read against the synthetic pattern.
  reading.checked = o.synthetic_vis;
  reading.values_right = reading.values_checked - reading.values_wrong;
  reading.passed = reading.values_wrong == 0;
  if (!reading.passed)
    reading.first_wrong = fmt::format("{} values unlike the pattern", reading.values_wrong);
  r.reading = reading;
}

// The predict direction: what was written, and with --duration how much
// of the observation in how long.
void predict_results(const Context& ctx, const Totals& t, double stream_s, report::Report& r,
                     report::Accuracy& accuracy) {
  const auto& o = ctx.options;
  accuracy.vis_rmse = t.vis_error.value();
  accuracy.vis_rmse_max = accuracy.vis_rmse;
  accuracy.vis_samples = t.vis_checked;
  if (!o.network_only) r.counts.visibilities_written = t.visibilities_written;  // nothing written there
  r.counts.bytes_written = t.bytes_written;
  r.counts.chunks_written = t.chunks_written;
  r.counts.chunks_rewritten = t.chunks_rewritten;
  if (o.duration) {
    report::Stonewall sw;
    sw.duration_s = *o.duration;
    sw.ended_early = t.walk_end >= 0 || t.tasks_skipped > 0;
    sw.visits_total = static_cast<index_t>(ctx.plan.visits.size());
    sw.visits_walked = t.walk_end >= 0 ? t.walk_end : sw.visits_total;
    sw.parts_total = static_cast<index_t>(ctx.plan.parts.size());
    sw.parts_done = t.parts_done;
    sw.visibilities_total = ctx.job.obs->visibility_count();
    sw.visibilities_done = t.visibilities;
    sw.fraction = static_cast<double>(t.visibilities) / static_cast<double>(sw.visibilities_total);
    sw.projected_s = sw.fraction > 0 ? stream_s / sw.fraction : 0;
    r.stonewall = sw;
  }
  if (!o.duration && !o.network_only && t.visibilities_written != ctx.job.obs->visibility_count())
    throw std::logic_error(
        fmt::format("wrote {} visibilities of {}", t.visibilities_written, ctx.job.obs->visibility_count()));
}

void timing_and_rates(const Context& ctx, const Setup& st, const Totals& t, const Outcome& out,
                      report::Report& r) {
  const double stream_s = out.stream_s;
  report::Timing timing;
  timing.planning_s = st.planning_s;
  timing.stream_s = stream_s;
  timing.input_s = t.input_s;
  timing.check_s = t.check_s;
  timing.degrid_s = t.degrid_s;  // --direction=both: the model's (the busiest streamer thread's)
  timing.image_s = t.grid_s;
  timing.write_s = t.write_s;
  timing.sync_s = t.sync_s;
  timing.open_s = t.open_s;
  timing.wall_s = MPI_Wtime() - st.t_wall;
  if (!ctx.imaging()) {
    timing.stages.emplace();
    for (const auto& w : out.all) *timing.stages += w.figures.stages;
  }
  r.timing = timing;
  report::Rates rates;
  rates.subgrids_per_s = t.subgrids / stream_s;
  rates.net_bytes_per_s = t.sent / stream_s;
  rates.vis_per_s = t.visibilities / stream_s;
  rates.vis_per_s_per_thread = rates.vis_per_s / std::max(1, ctx.roles.streamers * ctx.threads);
  rates.w_planes_per_s = t.planes / stream_s;
  rates.write_bytes_per_s = t.write_s + t.sync_s > 0 ? t.bytes_written / (t.write_s + t.sync_s) : 0;
  rates.raw_write_bytes_per_s = t.write_s > 0 ? t.bytes_written / t.write_s : 0;
  r.rates = rates;
  r.memory.peak_rss_bytes = 0;
  for (const auto& k : r.pipeline->per_rank)
    r.memory.peak_rss_bytes = std::max(*r.memory.peak_rss_bytes, k.peak_rss_bytes);
}

// --file-layout: what was asked, and whether every output (visibilities,
// --image) was made with it.
void record_file_layout(const Context& ctx, report::RunSettings& s) {
  const auto& o = ctx.options;
  const bool visibilities = ctx.job.obs && !ctx.imaging() && !o.output.empty() && !o.network_only &&
                            ctx.storage.store() != nullptr;
  s.file_layout = o.file_layout;
  s.file_layout_not_applied_why = visibilities || !o.image.empty()
                                      ? ctx.file_layout_not_set
                                      : std::string("the run made no output file");
  s.file_layout_applied = s.file_layout_not_applied_why.empty();
}

}  // namespace

report::Report planned_report(const Context& ctx, const Setup& st) {
  const auto& o = ctx.options;
  report::Report r;
  r.mode = "run";
  r.rec = ctx.job.p;
  r.pipeline = pipeline_section(ctx);
  r.memory = st.memory;
  // Rank 0 may be a producer without GPUs: the first streamer's are
  // reported (share_gpus).
  r.device = job::device_section(o.device, ctx.gpus);
  r.settings = report::RunSettings{};
  auto& s = *r.settings;
  // Synthetic visibilities have no sky and nothing to check.
  s.source_count = o.synthetic_vis ? 0 : o.source_count;
  s.seed = o.seed;
  s.direction = swiftly::to_string(o.direction);
  s.subgrids = r.pipeline->subgrid_visits;
  s.check = o.synthetic_vis ? 0 : o.check_subgrids;
  s.threads = ctx.threads;
  if (ctx.job.obs) {
    std::set<index_t> stacks;
    for (const auto& v : ctx.plan.visits) stacks.insert(v.stack);
    if (ctx.degridder)
      job::describe_degridding(s, ctx.job, *ctx.degridder, static_cast<index_t>(stacks.size()),
                               st.calibration);
    if (!ctx.imaging()) {
      s.vis_samples = o.synthetic_vis ? 0 : o.vis_samples;
      s.backend = ctx.storage.backend;
      s.durability = ctx.storage.durability;
      s.value_bytes = ctx.storage.value_bytes;
      s.nonce = ctx.nonce;
      s.output = o.output;
      s.store = ctx.storage.describe(o.output);
    }
    job::add_observation(r, *ctx.job.obs, *ctx.job.geometry, binning::summarise(st.counts));
    if (ctx.imaging() && !o.synthetic_vis) job::add_imaging_rule(r, ctx.job, *ctx.binner);
  }
  if (o.file_layout) record_file_layout(ctx, s);
  r.counts.facets = ctx.job.p.facet_count();
  r.counts.subgrids = ctx.job.p.subgrid_count();
  r.counts.subgrids_processed = r.pipeline->subgrid_visits;
  if (!o.inputs.empty()) {  // the rest once read
    r.reading = report::Reading{};
    r.reading->files = o.inputs;
  }
  if (!o.image.empty()) {  // the rest once written
    r.image = report::ImageFile{};
    r.image->path = o.image;
    r.image->format = image::is_fits_path(o.image) ? "fits" : "hdf5";
    r.image->used_size = ctx.job.p.used_size;
  }
  if (ctx.job.obs && !o.synthetic_vis)
    r.sky = job::sky_of(ctx.job.sources, ctx.job.geometry->pixel_lm);
  return r;
}

void gather_outcome(const Context& ctx, const RankResult& mine, int role, Outcome& out,
                    MPI_Comm comm) {
  const auto& roles = ctx.roles;
  out.pixel_sums = pixel_sums(ctx, mine, comm);
  const Wire wire = to_wire(mine, roles.rank, role);
  out.all.resize(roles.rank == 0 ? static_cast<size_t>(roles.size) : 1);
  MPI_Gather(&wire, sizeof(Wire), MPI_BYTE, out.all.data(), sizeof(Wire), MPI_BYTE, 0, comm);
  out.samples = gather_samples(ctx.timeline.samples(), comm);
  out.peers = gather_peers(mine, comm);
}

namespace {

// --calibration: the model's prediction of this run on its own hosts (a
// node per host name, the cores of rank 0's), beside what it measured.
report::Prediction predicted_beside_measured(const Context& ctx, const Setup& st,
                                             const Outcome& out, const report::Report& r) {
  const auto& o = ctx.options;
  std::map<std::string, index_t> node_of;
  std::vector<index_t> producer_nodes, streamer_nodes;
  for (const auto& w : out.all) {  // in rank order
    const auto node = node_of.emplace(w.host, static_cast<index_t>(node_of.size())).first->second;
    if (w.role == 0) producer_nodes.push_back(node);
    if (w.role == 1) streamer_nodes.push_back(node);
  }
  // Its chunk bytes counted as its writers write them (none: a dry run).
  auto w = prediction::work_of(ctx.job.p, st.counts, std::move(producer_nodes),
                               std::move(streamer_nodes), r.memory.contribution_bytes, 0);
  if (!o.output.empty())
    prediction::count_chunk_bytes(*ctx.binner, ctx.job.p, ctx.storage.value_bytes, w,
                                  std::max(1, ctx.threads));
  w.threads = r.pipeline->threads;
  w.producer_threads = r.pipeline->producer_threads;
  w.writers_per_streamer = o.writer_count;
  const prediction::Cluster cluster{
      static_cast<index_t>(node_of.size()),
      std::max(1, static_cast<int>(std::thread::hardware_concurrency())),
      o.prediction.link_bytes_per_s, o.prediction.storage_bytes_per_s};
  auto p = prediction::predict(prediction::read_calibration(o.prediction.calibration), cluster, w);
  p.measured_stream_s = out.stream_s;
  p.measured_bound = r.pipeline->bound;
  if (out.stream_s > 0) p.error = p.stream_s / out.stream_s - 1;
  return p;
}

}  // namespace

// Rank 0: what the run measured, into the planned report.
void fill_report(const Context& ctx, const Setup& st, const Outcome& out, report::Report& r) {
  const auto& o = ctx.options;
  const auto& p = ctx.job.p;
  report::Reading reading = r.reading.value_or(report::Reading{});
  const Totals t = add_up(out.all, o, r, reading);
  if (r.settings) r.settings->outputs_replaced = out.outputs_replaced;
  if (r.image) r.image = out.image;
  r.pipeline->bound = bound_of(ctx, t, out.stream_s);
  r.pipeline->peers = out.peers;
  report::judge_links(*r.pipeline);
  if (r.device && r.device->cuda()) {
    r.device->kernel_s = t.gpu.kernel_s;
    r.device->transfer_s = t.gpu.transfer_s;
    r.device->host_wait_s = t.gpu.host_wait_s;
  }
  r.counts.subgrids_checked = t.subgrids_checked;
  std::set<std::pair<index_t, index_t>> columns;
  for (const auto& v : ctx.plan.visits) columns.insert({v.stack, v.subgrid / p.subgrids_per_axis});
  r.counts.subgrid_columns = static_cast<index_t>(columns.size());
  r.counts.bytes_sent = t.sent;
  r.counts.bytes_received = t.received;
  if (o.timeline_s > 0) r.timeline = timeline_of(out.all, out.samples, o.timeline_s);
  if (ctx.job.obs && !ctx.imaging() && !o.network_only &&
      (!o.output.empty() || ctx.roles.writers > 0))
    r.transit = transit_figures(out.all, ctx, out.stream_s);
  report::Accuracy accuracy;
  accuracy.subgrid_rmse = t.subgrid_error.value();
  accuracy.subgrid_rmse_max = t.subgrid_error_worst >= 0 ? t.subgrid_error_worst : std::nan("");
  if (ctx.imaging())
    imaging_results(ctx, st, t, out, reading, r, accuracy);
  else if (ctx.job.obs)
    predict_results(ctx, t, out.stream_s, r, accuracy);
  // Synthetic or network only: no sky, nothing to check.
  if (!o.synthetic_vis && !o.network_only) r.accuracy = accuracy;
  timing_and_rates(ctx, st, t, out, r);
  if (!o.prediction.calibration.empty()) r.prediction = predicted_beside_measured(ctx, st, out, r);
}


}  // namespace iotest::pipeline
