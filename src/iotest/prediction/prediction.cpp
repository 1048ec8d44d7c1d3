#include "iotest/prediction/prediction.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <numeric>
#include <regex>
#include <utility>

#include "iotest/common/errors.hpp"
#include "iotest/common/openmp.hpp"
#include "iotest/pipeline/work.hpp"

namespace iotest::prediction {

namespace {

using nlohmann::json;

double number_at(const json& report, const json::json_pointer& where) {
  return report.contains(where) && report.at(where).is_number() ? report.at(where).get<double>()
                                                                : 0.0;
}

// Why this report cannot calibrate the model ("" when it can).
std::string not_a_calibration(const json& r) {
  if (r.value("mode", "") != "run") return "not the report of an `iotest run`";
  const auto& c = r.value("config", json::object());
  if (c.value("direction", "predict") != "predict") return "not of the predict direction";
  if (!r.contains("observation")) return "a run without --vis-set (nothing degridded)";
  const auto& p = r.value("pipeline", json::object());
  if (p.value("synthetic_vis", false)) return "a --synthetic-vis run (nothing degridded)";
  if (p.value("network_only", false)) return "a --network-only run (nothing computed)";
  if (p.value("producers", 0) < 1) return "a run without producers (--facet-workers=0)";
  if (r.value("device", json::object()).value("kind", "cpu") != "cpu")
    return "a GPU run (the model is the CPU path's)";
  const auto hosts = r.value("environment", json::object()).value("hosts", json::array());
  if (hosts.size() > 1)
    return fmt::format("a run on {} hosts (a calibration is one node's)", hosts.size());
  return "";
}

}  // namespace

Calibration calibration_from(const json& r, const std::string& source) {
  if (const auto why = not_a_calibration(r); !why.empty())
    throw UsageError("--calibration",
                     fmt::format("expected the report of a one-node `iotest run` that degridded "
                                 "visibilities, got '{}': {}",
                                 source, why));
  const auto at = [&](const char* where) { return number_at(r, json::json_pointer(where)); };
  Calibration c;
  c.source = source;
  const auto hosts = r.value("environment", json::object()).value("hosts", json::array());
  c.host = hosts.empty() || !hosts[0].is_string() ? "" : hosts[0].get<std::string>();
  // What the ranks did (a stonewalled run did less than its observation):
  // the streamers' visibilities and subgrid parts, the producers'
  // contributions.
  double visibilities = 0, parts = 0, contributions = 0, queue_wait = 0;
  for (const auto& rank : r["pipeline"].value("per_rank", json::array())) {
    visibilities += rank.value("visibilities", 0.0);
    queue_wait += rank.value("queue_wait_s", 0.0);
    parts += rank.value("subgrids", 0.0);
    contributions += rank.value("contributions", 0.0);
  }
  const double facets = at("/counts/facets"), stacks = std::max(1.0, at("/config/w_stacks"));
  if (visibilities <= 0 || parts <= 0 || contributions <= 0 ||
      at("/timing/stages/degrid_task_s") <= 0)
    throw UsageError("--calibration",
                     fmt::format("expected a run that degridded visibilities and computed "
                                 "contributions, got '{}' (its counts or stages are empty)",
                                 source));
  // A degrid task's seconds include those its thread waited on the
  // writers' full queue: the storage's, not the degridding's.
  const double degrid_s = at("/timing/stages/degrid_task_s") - queue_wait;
  if (degrid_s <= 0)
    throw UsageError("--calibration",
                     fmt::format("expected a run whose degrid tasks computed, got '{}': their "
                                 "time was all waits on the writers' queue",
                                 source));
  c.rates.degrid_s_per_vis = degrid_s / visibilities;
  c.rates.part_s = (at("/timing/stages/assembly_s") + at("/timing/stages/pieces_s") +
                    at("/timing/stages/tower_s")) /
                   parts;
  c.rates.contribution_s =
      (at("/timing/stages/column_s") + at("/timing/stages/contribution_s")) / contributions;
  c.rates.facet_s = at("/timing/stages/facet_s") / std::max(1.0, facets * stacks);
  if (at("/counts/bytes_written") > 0)
    c.rates.writer_bytes_per_s = at("/transit/write_bytes_per_s");
  return c;
}

void require_predictable(const JobKind& job) {
  const auto refuse = [](const std::string& why) {
    throw UsageError("--calibration",
                     "predicts a predict run on CPUs with its writers in situ; " + why);
  };
  if (!job.predict) refuse("not the imaging direction");
  if (!job.observation) refuse("expected a --vis-set (nothing to degrid)");
  if (job.synthetic) refuse("--synthetic-vis degrids nothing");
  if (job.network_only) refuse("--network-only computes nothing");
  if (job.gpu) refuse("--device=cuda is not modelled");
  if (job.in_transit) refuse("--writer-ranks (in transit) is not modelled");
}

Calibration read_calibration(const std::string& path) {
  const auto report = report::read_json(path, "--calibration");
  try {
    return calibration_from(report, path);
  } catch (const nlohmann::json::exception& e) {  // a figure of the wrong kind
    throw UsageError("--calibration",
                     fmt::format("expected an iotest run's report, got '{}': {}", path, e.what()));
  }
}

namespace {

using Stage = report::Prediction::Stage;

// When each thread on a node's cores ends, the cores shared fairly: while
// more threads have work than there are cores, each runs at cores /
// threads of a core, so a rank of little work ends early and the others
// speed up (processor sharing). `demand`: each thread's seconds alone.
std::vector<double> shared_finish(const std::vector<double>& demand, int cores) {
  std::vector<size_t> order(demand.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return demand[a] < demand[b]; });
  std::vector<double> finish(demand.size(), 0.0);
  double now = 0, done = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const double running = static_cast<double>(order.size() - i);
    const double rate = std::min(1.0, static_cast<double>(std::max(1, cores)) / running);
    now += (demand[order[i]] - done) / rate;
    done = demand[order[i]];
    finish[order[i]] = now;
  }
  return finish;
}

// Every rank's threads, each node's in one list: a rank's work split over
// its threads.
struct NodeThreads {
  std::vector<std::vector<double>> demand;  // per node, per thread
  explicit NodeThreads(index_t nodes) : demand(static_cast<size_t>(nodes)) {}
  // The rank's first thread: (node, index in the node's list).
  std::pair<size_t, size_t> add(index_t node, double work, int threads) {
    auto& d = demand.at(static_cast<size_t>(node));
    const size_t first = d.size();
    for (int t = 0; t < std::max(1, threads); ++t) d.push_back(work / std::max(1, threads));
    return {static_cast<size_t>(node), first};
  }
  std::vector<std::vector<double>> finish(int cores) const {
    std::vector<std::vector<double>> f;
    for (const auto& d : demand) f.push_back(shared_finish(d, cores));
    return f;
  }
};

// A producer's facets: facet f on producer f mod P (pipeline::Roles).
index_t facets_of(index_t producer, index_t producers, index_t facets) {
  return facets / producers + (producer < facets % producers ? 1 : 0);
}

std::vector<double> producer_work(const Calibration& c, const Work& w) {
  const auto n = static_cast<index_t>(w.producer_nodes.size());
  std::vector<double> work;
  for (index_t p = 0; p < n; ++p)
    work.push_back(static_cast<double>(facets_of(p, n, w.facets)) *
                   (static_cast<double>(w.visits) * c.rates.contribution_s +
                    static_cast<double>(w.stacks) * c.rates.facet_s));
  return work;
}

std::vector<double> streamer_work(const Calibration& c, const Work& w) {
  std::vector<double> work(w.streamer_nodes.size(), 0.0);
  for (const auto& part : w.parts)
    work.at(static_cast<size_t>(part.streamer)) +=
        c.rates.part_s + static_cast<double>(part.visibilities) * c.rates.degrid_s_per_vis;
  return work;
}

// The busiest of a role's ranks: when its threads end, sharing their
// node's cores with the other ranks there (`finish`, per node and thread).
Stage compute_stage(const char* name, const char* role, const std::vector<index_t>& nodes,
                    const std::vector<std::pair<size_t, size_t>>& first_threads,
                    const std::vector<std::vector<double>>& finish) {
  Stage s{name, 0, 0, ""};
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto [node, first] = first_threads[i];
    const double t = finish[node][first];
    if (t > s.seconds) s.seconds = t, s.where = fmt::format("{} {}, node {}", role, i, nodes[i]);
  }
  return s;
}

// Each part takes every facet's contribution: the bytes each node's link
// carries out and in, between producers and streamers on different nodes.
Stage network_stage(const Work& w, double link) {
  index_t nodes = 0;
  for (auto n : w.producer_nodes) nodes = std::max(nodes, n + 1);
  for (auto n : w.streamer_nodes) nodes = std::max(nodes, n + 1);
  std::vector<double> sent(static_cast<size_t>(nodes), 0.0), received(sent);
  const auto producers = static_cast<index_t>(w.producer_nodes.size());
  for (const auto& part : w.parts) {
    const index_t to = w.streamer_nodes.at(static_cast<size_t>(part.streamer));
    for (index_t p = 0; p < producers; ++p) {
      const index_t from = w.producer_nodes[static_cast<size_t>(p)];
      if (from == to) continue;
      const double bytes =
          static_cast<double>(facets_of(p, producers, w.facets) * w.contribution_bytes);
      sent[static_cast<size_t>(from)] += bytes;
      received[static_cast<size_t>(to)] += bytes;
    }
  }
  Stage s{"network", 0, 0, ""};
  if (link <= 0) return s;
  for (index_t n = 0; n < nodes; ++n) {
    for (const auto& [bytes, way] : {std::pair{&sent, "out"}, {&received, "in"}}) {
      const double t = (*bytes)[static_cast<size_t>(n)] / link;
      if (t > s.seconds) s.seconds = t, s.where = fmt::format("node {}'s link {}", n, way);
    }
  }
  return s;
}

// The streamers' chunks, each streamer's share of the bytes as of the
// visibilities, over its writers; and all of them into the storage.
Stage storage_stage(const Calibration& c, const Work& w, double storage) {
  Stage s{"storage", 0, 0, ""};
  if (w.bytes_written <= 0 || w.visibilities <= 0) return s;
  std::vector<double> vis(w.streamer_nodes.size(), 0.0);
  for (const auto& part : w.parts)
    vis.at(static_cast<size_t>(part.streamer)) += static_cast<double>(part.visibilities);
  // Each streamer's bytes as counted (count_chunk_bytes), else its share.
  const double per_vis = static_cast<double>(w.bytes_written) / static_cast<double>(w.visibilities);
  std::vector<double> bytes = w.streamer_bytes;
  if (bytes.size() != vis.size())
    for (const double v : vis) bytes.push_back(v * per_vis);
  if (c.rates.writer_bytes_per_s > 0)
    for (size_t i = 0; i < vis.size(); ++i) {
      const double t = bytes[i] / std::max(1, w.writers_per_streamer) / c.rates.writer_bytes_per_s;
      if (t > s.seconds) s.seconds = t, s.where = fmt::format("the writers of streamer {}", i);
    }
  if (storage > 0 && static_cast<double>(w.bytes_written) / storage > s.seconds)
    s.seconds = static_cast<double>(w.bytes_written) / storage, s.where = "the storage in all";
  return s;
}

}  // namespace

report::Prediction predict(const Calibration& c, const Cluster& cluster, const Work& w) {
  report::Prediction p;
  p.calibration = c.source;
  p.calibration_host = c.host;
  p.rates = c.rates;
  p.cluster = cluster;

  // Every rank's threads on its node's cores.
  NodeThreads threads(cluster.nodes);
  std::vector<std::pair<size_t, size_t>> producer_threads, streamer_threads;
  const auto producers = producer_work(c, w);
  const auto streamers = streamer_work(c, w);
  for (size_t i = 0; i < producers.size(); ++i)
    producer_threads.push_back(threads.add(w.producer_nodes[i], producers[i], w.producer_threads));
  for (size_t i = 0; i < streamers.size(); ++i)
    streamer_threads.push_back(threads.add(w.streamer_nodes[i], streamers[i], w.threads));
  const auto finish = threads.finish(cluster.cores_per_node);
  p.stages = {compute_stage("producers", "producer", w.producer_nodes, producer_threads, finish),
              network_stage(w, cluster.link_bytes_per_s),
              compute_stage("degridding", "streamer", w.streamer_nodes, streamer_threads, finish),
              storage_stage(c, w, cluster.storage_bytes_per_s)};
  // The stages overlap but for the pipeline's filling and draining: about
  // one part of each of the others, a streamer having parts / streamers.
  const auto longest =
      std::max_element(p.stages.begin(), p.stages.end(),
                       [](const Stage& a, const Stage& b) { return a.seconds < b.seconds; });
  double others = 0;
  for (const auto& s : p.stages)
    if (&s != &*longest) others += s.seconds;
  const double parts_each =
      std::max(1.0, static_cast<double>(w.parts.size()) /
                        static_cast<double>(std::max<size_t>(1, w.streamer_nodes.size())));
  p.stream_s = longest->seconds + others / parts_each;
  p.bound = longest->name;
  for (auto& s : p.stages) s.share = p.stream_s > 0 ? s.seconds / p.stream_s : 0;
  p.vis_per_s = p.stream_s > 0 ? static_cast<double>(w.visibilities) / p.stream_s : 0;
  p.bytes_written = w.bytes_written;
  return p;
}

Work work_of(const config::RecombinationParams& p, const binning::VisitCounts& counts,
             std::vector<index_t> producer_nodes, std::vector<index_t> streamer_nodes,
             index_t contribution_bytes, index_t bytes_written) {
  std::map<std::pair<index_t, index_t>, index_t> per_visit;
  for (index_t s = 0; s < counts.stacks; ++s)
    for (index_t g = 0; g < counts.subgrids; ++g)
      if (const index_t n = counts.visibilities[static_cast<size_t>(s * counts.subgrids + g)])
        per_visit[{counts.first_stack + s, g}] = n;
  const auto plan =
      pipeline::plan_work(p, per_visit, static_cast<int>(streamer_nodes.size()), true);
  Work w;
  w.producer_nodes = std::move(producer_nodes);
  w.streamer_nodes = std::move(streamer_nodes);
  w.facets = p.facet_count();
  w.stacks = counts.stacks;
  w.visits = static_cast<index_t>(plan.visits.size());
  for (const auto& v : plan.visits)
    w.visit_parts.push_back({v.stack, v.subgrid, v.visibilities, v.first_part, v.parts});
  for (const auto& part : plan.parts) {
    w.parts.push_back({part.visibilities, part.streamer});
    w.visibilities += part.visibilities;
  }
  w.contribution_bytes = contribution_bytes;
  w.bytes_written = bytes_written;
  return w;
}

namespace {

// The streamers that write each frequency chunk of one row chunk.
struct RowChunkWriters {
  std::vector<std::vector<int>> of_chunk;  // per frequency chunk
  void add(index_t freq_chunk, int streamer) {
    auto& s = of_chunk[static_cast<size_t>(freq_chunk)];
    if (std::find(s.begin(), s.end(), streamer) == s.end()) s.push_back(streamer);
  }
};

// One range of baselines [b_begin, b_end) of count_chunk_bytes: `before`
// holds each visit's visibilities in the baselines before it; `bytes`
// gains each streamer's.
void count_range(const binning::Binner& binner, const std::vector<std::int64_t>& visit_of,
                 index_t subgrids, index_t value_bytes, const Work& w, index_t b_begin,
                 index_t b_end, std::vector<index_t> before, std::vector<double>& bytes) {
  const auto& obs = binner.observation();
  const index_t times = obs.time.steps, time_chunk = obs.time.chunk;
  const index_t channels = obs.freq.steps, freq_chunk = obs.freq.chunk;
  std::vector<index_t> in_row(before.size(), 0);
  std::vector<size_t> touched;
  RowChunkWriters writers{std::vector<std::vector<int>>(static_cast<size_t>(obs.freq.chunks()))};
  for (index_t b = b_begin; b < b_end; ++b) {
    if (binner.leaves_out(b)) continue;
    for (index_t t0 = 0; t0 < times; t0 += time_chunk) {
      const index_t t1 = std::min(times, t0 + time_chunk);
      binner.runs(b, t0, t1, [&](index_t subgrid, const binning::VisRun& run) {
        const auto found = visit_of[static_cast<size_t>(
            (run.w_stack - binner.first_stack()) * subgrids + subgrid)];
        if (found < 0) return;
        const auto v = static_cast<size_t>(found);
        const auto& visit = w.visit_parts[v];
        index_t part = 0;  // part i starts at i / parts of the visit's visibilities
        while (part + 1 < visit.parts && before[v] >= visit.visibilities * (part + 1) / visit.parts)
          ++part;
        writers.add(run.chan_begin / freq_chunk,
                    w.parts[static_cast<size_t>(visit.first_part + part)].streamer);
        if (in_row[v] == 0) touched.push_back(v);
        in_row[v] += run.count();
      });
      for (const auto v : touched) before[v] += std::exchange(in_row[v], 0);
      touched.clear();
      for (size_t f = 0; f < writers.of_chunk.size(); ++f) {
        const index_t first = static_cast<index_t>(f) * freq_chunk;
        const double chunk = static_cast<double>(
            (t1 - t0) * (std::min(channels, first + freq_chunk) - first) * value_bytes);
        for (const int streamer : writers.of_chunk[f])
          bytes[static_cast<size_t>(streamer)] += chunk;
        writers.of_chunk[f].clear();
      }
    }
  }
}

}  // namespace

void count_chunk_bytes(const binning::Binner& binner, const config::RecombinationParams& p,
                       index_t value_bytes, Work& w, int threads) {
  // A visit's index by (stack, subgrid), densely, as VisitCounts::at.
  const index_t subgrids = p.subgrid_count();
  std::vector<std::int64_t> visit_of(static_cast<size_t>(binner.stacks() * subgrids), -1);
  for (size_t v = 0; v < w.visit_parts.size(); ++v)
    visit_of[static_cast<size_t>((w.visit_parts[v].stack - binner.first_stack()) * subgrids +
                                 w.visit_parts[v].subgrid)] = static_cast<std::int64_t>(v);
  // Ranges of baselines, one a thread. Each starts from every visit's
  // visibilities in the ranges before it (storage order: baseline, then
  // time), which say which of its parts holds a row chunk: counted first,
  // a cheaper walk (no cut at frequency chunks).
  const index_t baselines = binner.observation().baseline_count();
  const int ranges =
      static_cast<int>(std::clamp<index_t>(threads, 1, std::max<index_t>(1, baselines)));
  const auto first_of = [&](int i) { return baselines * i / ranges; };
  std::vector<std::vector<index_t>> before(static_cast<size_t>(ranges),
                                           std::vector<index_t>(w.visit_parts.size(), 0));
  for (int i = 1; i < ranges; ++i) {
    const auto counts = binner.count_visits(first_of(i - 1), first_of(i), threads);
    before[static_cast<size_t>(i)] = before[static_cast<size_t>(i - 1)];
    for (size_t v = 0; v < w.visit_parts.size(); ++v)
      before[static_cast<size_t>(i)][v] += counts.visibilities[static_cast<size_t>(
          counts.at(w.visit_parts[v].stack, w.visit_parts[v].subgrid))];
  }
  std::vector<std::vector<double>> bytes(static_cast<size_t>(ranges),
                                         std::vector<double>(w.streamer_nodes.size(), 0.0));
#pragma omp parallel for num_threads(ranges) schedule(static, 1)
  for (int i = 0; i < ranges; ++i)
    count_range(binner, visit_of, subgrids, value_bytes, w, first_of(i), first_of(i + 1),
                before[static_cast<size_t>(i)], bytes[static_cast<size_t>(i)]);
  w.streamer_bytes.assign(w.streamer_nodes.size(), 0.0);
  double total = 0;
  for (const auto& range : bytes)
    for (size_t s = 0; s < range.size(); ++s) {
      w.streamer_bytes[s] += range[s];
      total += range[s];
    }
  w.bytes_written = static_cast<index_t>(total);
}

std::pair<std::vector<index_t>, std::vector<index_t>> nodes_dealt(index_t producers,
                                                                  index_t streamers,
                                                                  index_t nodes) {
  std::vector<index_t> p, s;
  for (index_t r = 0; r < producers; ++r) p.push_back(r % nodes);
  for (index_t r = producers; r < producers + streamers; ++r) s.push_back(r % nodes);
  return {p, s};
}

index_t bound_moves_at(const std::vector<report::Prediction::AtNodes>& by_nodes) {
  for (size_t i = 1; i < by_nodes.size(); ++i)
    if (by_nodes[i].bound != by_nodes[i - 1].bound) return by_nodes[i].nodes;
  return 0;
}

double parse_rate(const std::string& text, const std::string& option) {
  static const std::regex form(
      R"(^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtTpP]?)(bit|B)?(/s)?\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, form))
    throw UsageError(option, fmt::format("expected a rate such as 100Gbit, 12.5GB or 1.2e9 "
                                         "(bytes a second), got '{}'",
                                         text));
  // tc writes mbit and gbit: a prefix in either case (no one means milli).
  const char prefix = static_cast<char>(std::toupper(m[2].str().empty() ? ' ' : m[2].str()[0]));
  const double scale = prefix == 'K'   ? 1e3
                       : prefix == 'M' ? 1e6
                       : prefix == 'G' ? 1e9
                       : prefix == 'T' ? 1e12
                       : prefix == 'P' ? 1e15
                                       : 1;
  const double value =
      std::strtod(m[1].str().c_str(), nullptr) * scale / (m[3] == "bit" ? 8.0 : 1.0);
  if (!(value > 0) || !std::isfinite(value))
    throw UsageError(option, fmt::format("expected a rate above 0, got '{}'", text));
  return value;
}

}  // namespace iotest::prediction
