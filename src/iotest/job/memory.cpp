#include "iotest/job/memory.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "iotest/degrid/tasks.hpp"

namespace iotest::job {
namespace {

constexpr index_t kCplx = sizeof(cplx);
constexpr index_t kHdf5FileBytes = index_t{4} << 20;  // chunk cache and metadata blocks

// What every rank with a vis-set holds: the binner's tracks and bounds, and
// the degridder's antenna table and phase screen.
index_t tracks_bytes(const Job& job) {
  if (!job.obs) return 0;
  const auto& obs = *job.obs;
  const index_t uvw = obs.time.steps * obs.antenna_count() * 24;
  const index_t baselines = obs.baseline_count();
  return 2 * uvw + baselines * (48 + 2 * 8) + job.p.N * 4 + job.p.xM * job.p.xM * kCplx;
}

index_t max_of(const std::vector<index_t>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

}  // namespace

index_t max_tower_planes(const Job& job, const binning::VisitCounts& counts) {
  if (!job.obs) return 0;
  if (job.w.w_free()) return 1;
  const double dw = job.w.planes.dw;
  double widest = 0;
  for (size_t i = 0; i < counts.visibilities.size(); ++i)
    if (counts.visibilities[i] > 0) widest = std::max(widest, counts.w_hi[i] - counts.w_lo[i]);
  return static_cast<index_t>(std::ceil(widest / dw)) + job.kernel.w_support + 1;
}

index_t task_visibilities(const Job& job, const binning::VisitCounts& counts,
                          index_t bls_per_task) {
  const auto& obs = *job.obs;
  const index_t row_chunk = obs.time.chunk * obs.freq.steps;
  return std::min({degrid::kTaskVisibilities + row_chunk, bls_per_task * row_chunk,
                   max_of(counts.visibilities)});
}

report::Memory estimate_memory(const Job& job, const RunShape& s,
                               const binning::VisitCounts* counts) {
  const auto& p = job.p;
  report::Memory m;
  m.image_bytes = p.image_bytes();
  m.facet_bytes = p.yB * p.yB * kCplx;
  m.prepared_facet_bytes = p.yN * p.yB * kCplx;
  m.contribution_bytes = p.m * p.m * kCplx;
  m.subgrid_bytes = p.xM * p.xM * kCplx;
  const index_t column = p.m * p.yN * kCplx, xA2 = p.xA * p.xA * kCplx;
  const index_t tracks = tracks_bytes(job);
  const auto add = [&](const char* role, const char* name, index_t bytes) {
    if (bytes > 0) m.items.push_back({role, name, bytes});
    return bytes;
  };

  // A producer: its share of the facets, prepared, with a column buffer
  // each; per thread a facet and a column workspace; its send slots.
  // Imaging: a w-stack's facet sums, a column sum each, the dirty image
  // facets, per thread workspaces, receive slots. Both: the two sides.
  const bool predicts = s.direction != swiftly::Direction::image;
  const bool images = s.direction != swiftly::Direction::predict;
  if (s.producers > 0) {
    const index_t own = (p.facet_count() + s.producers - 1) / s.producers;
    const index_t t = s.producer_threads;
    const index_t workspaces = t * (m.facet_bytes + p.yB * p.m * kCplx + column);
    m.producer_bytes =
        add("producer", "process", kProcessBytes) + add("producer", "tracks", tracks);
    if (s.network_only)
      m.producer_bytes += add("producer", "send slots", s.send_queue * t * m.contribution_bytes);
    else if (predicts)
      m.producer_bytes += add("producer", "prepared facets", own * m.prepared_facet_bytes) +
                          add("producer", "column buffers", own * column) +
                          add("producer", "facet and column workspaces", workspaces) +
                          add("producer", "send slots", s.send_queue * t * m.contribution_bytes);
    if (images)
      m.producer_bytes += add("producer", "facet sums", own * m.prepared_facet_bytes) +
                          add("producer", "column sums", own * column) +
                          add("producer", "dirty image facets", own * m.facet_bytes) +
                          add("producer", "imaging facet and column workspaces", workspaces) +
                          add("producer", "receive slots", s.send_queue * t * m.contribution_bytes);
    // Rank 0 writes the image (the others send it blocks: less).
    if (images && s.image)
      m.producer_bytes +=
          add("producer", "image writer (rank 0)", image::image_writer_bytes(s.image_fits, p.yB));
  }

  // A streamer: receive slots (one contribution per facet each), towers
  // (sum, screen, scratch and planes; one per thread and one assembling),
  // per thread its subgrid buffers, task buffers and open chunks, the
  // pieces of the visits in flight, and its writers' queues.
  if (s.streamers > 0 && images && job.obs && counts) {
    // Imaging: send slots (one contribution per facet each), a tower, task
    // buffers, the chunks a task reads (at most one a run) and its visit's
    // pieces per thread. Both: per thread the model's tower, subgrid sum
    // and visibilities too.
    const int t = s.threads;
    const auto& obs = *job.obs;
    // Storage only (reading a synthetic set): no planes, nothing to send.
    const index_t planes = s.synthetic ? 0 : max_tower_planes(job, *counts);
    const index_t task_vis = task_visibilities(job, *counts, s.bls_per_task);
    const index_t runs =
        task_vis / std::max<index_t>(1, std::min(obs.freq.chunk, obs.freq.steps)) * 2;
    const index_t chunk = obs.time.chunk * obs.freq.chunk * kCplx;
    m.streamer_bytes =
        add("streamer", "process", kProcessBytes) +
        add("streamer", "send slots",
            s.synthetic ? 0 : s.subgrid_queue * p.facet_count() * m.contribution_bytes) +
        add("streamer", "tracks", tracks) +
        add("streamer", "towers", t * (3 * m.subgrid_bytes + planes * xA2)) +
        add("streamer", "task buffers",
            t * (task_vis * kCplx + runs * static_cast<index_t>(sizeof(binning::VisRun)))) +
        add("streamer", "chunks read",
            t * (std::min(s.bls_per_task * obs.freq.chunks(), runs) + 1) * chunk) +
        add("streamer", "visit pieces",
            t * max_of(counts->pieces) *
                static_cast<index_t>(sizeof(binning::VisitRuns::Piece) +
                                     sizeof(binning::TrackPiece)));
    if (predicts)
      m.streamer_bytes += add("streamer", "model towers and visibilities",
                              t * (3 * m.subgrid_bytes + planes * xA2 + task_vis * kCplx));
  } else if (s.streamers > 0) {
    const int t = s.threads;
    m.streamer_bytes =
        add("streamer", "process", kProcessBytes) +
        add("streamer", "receive slots",
            s.subgrid_queue * (s.producers > 0 ? p.facet_count() * m.contribution_bytes : 0)) +
        add("streamer", "tracks", tracks);
    if (job.obs && counts && !s.network_only) {
      const auto& obs = *job.obs;
      const index_t planes = s.synthetic ? 0 : max_tower_planes(job, *counts);
      const index_t task_vis = task_visibilities(job, *counts, s.bls_per_task);
      // A chunk as the pipeline carries it: values and a presence bit each.
      const index_t values = obs.time.chunk * obs.freq.chunk;
      const index_t chunk = values * kCplx + (values + 63) / 64 * 8;
      const index_t queue_slots = std::max<index_t>(1, s.visibility_queue / s.writer_count);
      const index_t chunks = obs.baseline_count() * obs.time.chunks() * obs.freq.chunks();
      const bool in_transit = s.writer_ranks > 0;
      // Synthetic: a task holds its runs alone, and an open chunk its
      // presence bits (the values are made in the writers' queues).
      const index_t task_values = s.synthetic ? 0 : task_vis * kCplx;
      const index_t open_chunk = s.synthetic ? chunk - values * kCplx : chunk;
      m.streamer_bytes +=
          add("streamer", "towers", (t + 1) * (3 * m.subgrid_bytes + planes * xA2)) +
          add("streamer", "subgrid buffers", t * (m.subgrid_bytes + 2 * xA2)) +
          add("streamer", "task buffers",
              t * (task_values +
                   task_vis / std::max<index_t>(1, std::min(obs.freq.chunk, obs.freq.steps)) * 2 *
                       static_cast<index_t>(sizeof(binning::VisRun)))) +
          add("streamer", "open chunks", t * obs.freq.chunks() * open_chunk) +
          add("streamer", "visit pieces",
              (t + 1) * max_of(counts->pieces) *
                  static_cast<index_t>(sizeof(binning::VisitRuns::Piece) +
                                       sizeof(binning::TrackPiece)));
      // Held parts of chunks, the writers' chunk maps, HDF5's caches and
      // the checksums of the chunks written (16 B each, a writer's even
      // share of the observation's) live with the writers: in the
      // streamer, or a writer rank in transit, unless they are forked.
      const index_t writers_in_all =
          std::max<index_t>(1, (in_transit ? s.writer_ranks : s.streamers) * s.writer_count);
      // Held parts: as many as the queue's slots, and one more lent to the
      // writer's I/O thread while it writes a merged chunk; what its
      // back-end holds per row chunk, for every row chunk.
      const index_t row_chunks = obs.baseline_count() * obs.time.chunks();
      const index_t writer = (queue_slots + 1 + s.writer_held_chunks) * chunk +
                             s.writer_held_bytes + chunks / 8 +
                             row_chunks * s.writer_row_chunk_bytes +
                             (s.writes ? kHdf5FileBytes + 16 * (chunks / writers_in_all + 1) : 0);
      const char* writing_role = in_transit ? "writer" : "streamer";
      index_t& writing_bytes = in_transit ? m.writer_bytes : m.streamer_bytes;
      const index_t message = chunk + static_cast<index_t>(sizeof(std::int64_t)) * 4;
      if (!in_transit && s.files_by_frequency && s.streamers > 1)
        // In situ, each output a frequency range: the streamer's forwarding
        // queue, its messages in flight and the exchange's receives posted,
        // beside its own writers' queues.
        m.streamer_bytes += add("streamer", "exchange queue", s.visibility_queue * chunk) +
                            add("streamer", "exchange send slots", s.transit_queue * message) +
                            add("streamer", "exchange receive slots", s.transit_queue * message);
      if (in_transit) {
        // The streamer's one chunk queue and its messages in flight; the
        // writer rank's receives posted and its writers' queues.
        m.streamer_bytes += add("streamer", "visibility queue", s.visibility_queue * chunk) +
                            add("streamer", "transit send slots", s.transit_queue * message);
        m.writer_bytes = add("writer", "process", kProcessBytes) + add("writer", "tracks", tracks) +
                         add("writer", "transit receive slots", s.transit_queue * message);
      }
      writing_bytes += add(writing_role, "visibility queue", s.writer_count * queue_slots * chunk);
      if (s.fork_writer)
        add("forked writer", "held chunk parts, chunk map, HDF5 caches, checksums", writer);
      else
        writing_bytes += add(writing_role, "held chunk parts, chunk maps, HDF5 caches, checksums",
                             s.writer_count * writer);
      // A shared output's first writer makes it with HDF5's serial driver
      // (header, every chunk allocated), and what that file's library
      // state and free lists keep stays beside the parallel file's: 8-9
      // MiB more on that rank across eight hosts (tests/cluster/
      // test_eight_hosts.py), a role's estimate being its largest rank's.
      if (s.shared_output)
        writing_bytes +=
            add(writing_role, "the shared output made (its first writer)", 2 * kHdf5FileBytes);
    } else {
      m.streamer_bytes += add("streamer", "towers", (t + 1) * 3 * m.subgrid_bytes) +
                          add("streamer", "subgrid buffers", t * (m.subgrid_bytes + 2 * xA2));
    }
  }
  // --device=cuda: the streamers' GPU memory, apart from their host memory
  // (a GPU's, not a node's): what degrids or grids on the GPU.
  if (s.device == device::Kind::cuda && s.streamers > 0 && job.obs && counts && !s.synthetic &&
      !s.network_only) {
    const auto shape = gpu_shape(job, *counts, s.bls_per_task);
    for (const auto& i : device::gpu_memory_items(shape))
      if (i.bytes > 0) m.items.push_back({"streamer GPU", i.name, i.bytes});
    m.streamer_gpu_bytes = device::gpu_memory_bytes(shape);
  }
  if (s.assigner)
    m.assigner_bytes =
        add("assigner", "process", kProcessBytes) + add("assigner", "tracks", tracks);
  m.single_process_bytes = estimate_single_process(job, s.threads, counts, s.writes);
  return m;
}

device::GpuShape gpu_shape(const Job& job, const binning::VisitCounts& counts,
                           index_t bls_per_task) {
  const auto& obs = *job.obs;
  device::GpuShape g;
  g.xM = job.p.xM;
  g.xA = job.p.xA;
  g.tower_planes = max_tower_planes(job, counts);
  g.batch_subgrids = device::kDefaultBatchSubgrids;
  // A batch's visibilities: a task's at most for each of its subgrids, and
  // no more than the busiest visits of the observation hold in all.
  std::vector<index_t> busiest = counts.visibilities;
  const auto k = static_cast<std::ptrdiff_t>(
      std::min<size_t>(busiest.size(), static_cast<size_t>(g.batch_subgrids)));
  std::partial_sort(busiest.begin(), busiest.begin() + k, busiest.end(), std::greater<>());
  index_t held = 0;
  for (std::ptrdiff_t i = 0; i < k; ++i) held += busiest[static_cast<size_t>(i)];
  g.batch_visibilities = std::min(
      {g.batch_subgrids * task_visibilities(job, counts, bls_per_task), held,
       std::max(device::kMaxBatchVisibilities, task_visibilities(job, counts, bls_per_task))});
  // The runs that place them: as the host's task buffers, two for each
  // frequency chunk's share.
  g.batch_runs =
      g.batch_visibilities / std::max<index_t>(1, std::min(obs.freq.chunk, obs.freq.steps)) * 2;
  g.table_bytes =
      obs.time.steps * obs.antenna_count() * 24 + obs.freq.steps * 8 + kKernelCoefficientBytes;
  return g;
}

index_t gpu_host_bytes(const Job& job, const binning::VisitCounts& counts, index_t bls_per_task) {
  const auto g = gpu_shape(job, counts, bls_per_task);
  constexpr index_t kComplex = sizeof(cplx);
  return device::gpu_staging_bytes(g) + g.batch_subgrids * g.xM * g.xM * kComplex +
         g.batch_visibilities * kComplex;
}

index_t streamers_per_gpu(index_t streamers, index_t gpus) {
  return gpus > 0 ? (streamers + gpus - 1) / gpus : 0;
}

void require_gpu_memory(index_t streamer_gpu_bytes, index_t streamers,
                        const std::vector<device::GpuInfo>& gpus) {
  const int n = static_cast<int>(gpus.size());
  if (n == 0) return;
  std::vector<index_t> held(gpus.size(), 0);
  for (index_t i = 0; i < streamers; ++i)
    held[static_cast<size_t>(device::gpu_for_local_rank(static_cast<int>(i), n))] += 1;
  const auto gib = [](index_t b) { return static_cast<double>(b) / (1024.0 * 1024 * 1024); };
  for (size_t g = 0; g < gpus.size(); ++g) {
    const index_t bytes = held[g] * streamer_gpu_bytes;
    if (held[g] == 0 || bytes <= gpus[g].memory_bytes) continue;
    throw UsageError(
        "--device",
        fmt::format("cuda: GPU {} ({}) holds {} streamer(s) x {:.2f} GiB = {:.2f} GiB by the "
                    "memory model, more than its {:.2f} GiB; use fewer streamers a node, a node "
                    "with more GPUs, or a smaller --rec-set or --bls-per-task",
                    gpus[g].index, gpus[g].name, held[g], gib(streamer_gpu_bytes), gib(bytes),
                    gib(gpus[g].memory_bytes)));
  }
}

index_t estimate_single_process(const Job& job, int threads, const binning::VisitCounts* counts,
                                bool writes) {
  const auto& p = job.p;
  const index_t nf2 = p.facet_count(), t = threads;
  const index_t prepared = p.yN * p.yB * kCplx, column = p.m * p.yN * kCplx;
  const index_t column_workspace = p.m * p.yB * kCplx + column;
  const index_t contribution = p.m * p.m * kCplx, subgrid = p.xM * p.xM * kCplx;
  const index_t facet = p.yB * p.yB * kCplx;
  // Every facet prepared with its column buffer, per thread the workspaces;
  // without visibilities (`recombine`) the finished subgrids of a column
  // and a line of the image.
  index_t bytes = kProcessBytes + nf2 * (prepared + column) +
                  t * (column_workspace + contribution + subgrid + facet);
  if (!job.obs || !counts)
    return bytes + p.subgrids_per_axis * (p.xA * p.xA * kCplx + subgrid) + p.N * kCplx;
  const auto& obs = *job.obs;
  const index_t xA2 = p.xA * p.xA * kCplx;
  const index_t task_vis = task_visibilities(job, *counts, 256);
  const index_t chunk = obs.time.chunk * obs.freq.chunk * kCplx;
  return bytes + tracks_bytes(job) +
         t * (2 * subgrid + max_tower_planes(job, *counts) * xA2 + task_vis * kCplx +
              obs.freq.chunks() * chunk) +
         t * max_of(counts->pieces) * static_cast<index_t>(sizeof(binning::VisitRuns::Piece)) +
         (writes ? kHdf5FileBytes : 0) +
         obs.baseline_count() * obs.time.chunks() * obs.freq.chunks() / 8;
}

}  // namespace iotest::job
