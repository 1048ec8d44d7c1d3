// The sections of `iotest run`: the pipeline and its ranks, in situ or in
// transit, repetitions, stonewalling, the time line and the dirty image
// file. Each: its JSON, its text and its CSV next to each other.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "iotest/report/sections.hpp"

namespace iotest::report::detail {

// pipeline, with a row per rank

json to_json(const PeerTraffic& p);
json to_json(const HostLink& l);

template <class T>
json json_array(const std::vector<T>& items) {
  json a = json::array();
  for (const auto& i : items) a.push_back(to_json(i));
  return a;
}

}  // namespace iotest::report::detail

namespace iotest::report {

// The links' judgement (Pipeline::links, slow_link): each host's link is
// judged by its contributions' bytes per second in flight against those of
// the messages between the other hosts, not against the other links': in
// a walk that moves in step every rank waits as long, but a message to or
// from the slow host is in flight longer, and every link carries some of
// those (a fast host's link mixes its messages to the slow host with the
// others', so its own rate halves too with three hosts). Each of the
// host's pairs must be that slow too, so that one slow pair is not
// blamed on a link (kSlowLinkFraction).
void judge_links(Pipeline& pl) {
  pl.links.clear();
  pl.slow_link.clear();
  std::map<int, std::string> host_of;
  for (const auto& k : pl.per_rank) host_of[k.rank] = k.host;
  std::map<std::string, HostLink> links;
  // Every message across hosts once, on its sender's side: (from, to, bytes, seconds).
  struct Crossing {
    std::string from, to;
    index_t bytes = 0, messages = 0;
    double seconds = 0;
  };
  std::vector<Crossing> crossings;
  for (const auto& p : pl.peers) {
    const std::string& host = host_of[p.rank];
    if (host == p.peer_host) continue;  // within a host: no link crossed
    auto& l = links[host];
    l.host = host;
    l.bytes_out += p.bytes_sent;
    l.bytes_in += p.bytes_received;
    l.messages += p.messages_sent + p.messages_received;
    l.in_flight_s += p.sent_in_flight_s + p.received_in_flight_s;
    if (p.messages_sent > 0)
      crossings.push_back({host, p.peer_host, p.bytes_sent, p.messages_sent, p.sent_in_flight_s});
  }
  double slowest = 0;
  for (auto& [host, l] : links) {
    if (l.messages == 0) continue;
    if (l.in_flight_s > 0)
      l.bytes_per_s = static_cast<double>(l.bytes_out + l.bytes_in) / l.in_flight_s;
    index_t bytes = 0;
    double seconds = 0;
    for (const auto& c : crossings)
      if (c.from != host && c.to != host) {
        bytes += c.bytes;
        seconds += c.seconds;
      }
    if (seconds > 0) l.others_bytes_per_s = static_cast<double>(bytes) / seconds;
    // Its messages with each other host, each pair slow too: a slow link
    // slows every pair its host is in, where a pair that is slow alone (a
    // rank late to its receives on a busy node) is not its link's doing.
    std::map<std::string, std::pair<index_t, double>> pairs;
    for (const auto& c : crossings)
      if (c.from == host || c.to == host) {
        auto& [pair_bytes, pair_seconds] = pairs[c.from == host ? c.to : c.from];
        pair_bytes += c.bytes;
        pair_seconds += c.seconds;
      }
    const bool every_pair_slow = std::all_of(pairs.begin(), pairs.end(), [&](const auto& p) {
      const auto& [pair_bytes, pair_seconds] = p.second;
      return pair_seconds > 0 &&
             static_cast<double>(pair_bytes) / pair_seconds < kSlowLinkFraction * l.others_bytes_per_s;
    });
    if (l.bytes_per_s > 0 && l.others_bytes_per_s > 0 &&
        l.bytes_per_s < kSlowLinkFraction * l.others_bytes_per_s && every_pair_slow &&
        (pl.slow_link.empty() || l.bytes_per_s < slowest)) {
      pl.slow_link = host;
      slowest = l.bytes_per_s;
    }
    pl.links.push_back(l);
  }
}

}  // namespace iotest::report

namespace iotest::report::detail {

// "network: node3's link (x/s against y/s between the other hosts)", or
// the bound as it is.
std::string pipeline_bound_text(const Pipeline& pl, const Report& r) {
  std::string s = bound_text(pl.bound, r);
  if (pl.bound != "network" || pl.slow_link.empty()) return s;
  for (const auto& l : pl.links)
    if (l.host == pl.slow_link)
      s += fmt::format(": {}'s link ({}/s in flight against {}/s between the other hosts)", l.host,
                       bytes_text(l.bytes_per_s), bytes_text(l.others_bytes_per_s));
  return s;
}

json to_json(const Pipeline& pl) {
  json ranks = json::array();
  for (const auto& k : pl.per_rank) {
    json rank = json::object(), queues = json::object();
    for_each_rank_figure(k, [&](const char* name, const auto& v) { rank[name] = v; });
    for_each_queue_high_water(k, [&](const char* name, index_t v) { queues[name] = v; });
    rank["queue_high_water"] = queues;
    rank["stages"] = to_json(k.stages);
    ranks.push_back(rank);
  }
  return {{"ranks", pl.ranks},
          {"producers", pl.producers},
          {"streamers", pl.streamers},
          {"assigner", pl.assigner},
          {"threads", pl.threads},
          {"producer_threads", pl.producer_threads},
          {"writers_per_streamer", pl.writers_per_streamer},
          {"writer_ranks", pl.writer_ranks},
          {"fork_writer", pl.fork_writer},
          {"synthetic_vis", pl.synthetic_vis},
          {"synthetic_order", pl.synthetic_order},
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
          {"per_rank", ranks},
          {"peers", json_array(pl.peers)},
          {"links", json_array(pl.links)},
          {"slow_link", pl.slow_link}};
}

json to_json(const PeerTraffic& p) {
  return {{"rank", p.rank},
          {"peer_host", p.peer_host},
          {"messages_sent", p.messages_sent},
          {"messages_received", p.messages_received},
          {"bytes_sent", p.bytes_sent},
          {"bytes_received", p.bytes_received},
          {"sent_in_flight_s", p.sent_in_flight_s},
          {"received_in_flight_s", p.received_in_flight_s}};
}

json to_json(const HostLink& l) {
  return {{"host", l.host},
          {"bytes_out", l.bytes_out},
          {"bytes_in", l.bytes_in},
          {"messages", l.messages},
          {"in_flight_s", l.in_flight_s},
          {"bytes_per_s", l.bytes_per_s},
          {"others_bytes_per_s", l.others_bytes_per_s}};
}

// timing.roles: per role, the longest busy, wait and idle times of its ranks.
json roles_json(const Pipeline& pl) {
  json roles = json::object();
  for (const auto& k : pl.per_rank) {
    auto& role = roles[k.role];
    if (role.is_null()) role = json::object();
    for (const auto& [key, v] :
         {std::pair{"busy_s", k.busy_s}, {"wait_s", k.wait_s}, {"idle_s", k.idle_s}})
      role[key] = std::max(role.value(key, 0.0), v);
    role["ranks"] = role.value("ranks", 0) + 1;
  }
  return roles;
}

// The stream, its stages and the table of ranks (with the run's timing and rates).
std::string render_text(const Pipeline& pl, const Report& r) {
  if (!r.timing || !r.rates) return {};
  const auto& t = *r.timing;
  const auto& q = *r.rates;
  std::string s = fmt::format(
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
  if (pl.links.empty() && !pl.peers.empty())
    s += "  links between hosts: none crossed (one host), none to judge\n";
  if (!pl.links.empty()) {
    s += fmt::format("  {:<16} {:>10} {:>10} {:>10} {:>12} {:>14} {:>14}\n", "host link", "out",
                     "in", "messages", "in flight s", "rate", "others' rate");
    for (const auto& l : pl.links)
      s += fmt::format("  {:<16} {:>10} {:>10} {:>10} {:>12.2f} {:>14} {:>14}{}\n", l.host,
                       bytes_text(l.bytes_out), bytes_text(l.bytes_in), l.messages, l.in_flight_s,
                       bytes_text(l.bytes_per_s) + "/s",
                       l.others_bytes_per_s > 0 ? bytes_text(l.others_bytes_per_s) + "/s" : "-",
                       l.host == pl.slow_link ? "  slow" : "");
  }
  s += fmt::format("  busiest rank {}; bound by {}{}\n", pl.slowest_rank, pipeline_bound_text(pl, r),
                   pl.synthetic_vis ? " (synthetic visibilities: storage only)" : "");
  return s;
}

// ranks: a row per rank, as per_rank in the JSON (queue high-water marks
// and stages flattened).
void csv_tables(const Pipeline& pl, Tables& out) {
  // f(column, value) for each column of rank k.
  const auto columns = [](const RankStats& k, const auto& f) {
    for_each_rank_figure(k, f);
    for_each_queue_high_water(
        k, [&](const char* name, index_t v) { f(std::string(name) + "_queue_max", v); });
    for_each_stage(k.stages, f);
  };
  CsvTable t{"ranks", {}, {}};
  columns(RankStats{}, [&](const std::string& name, const auto&) { t.header.push_back(name); });
  for (const auto& k : pl.per_rank) {
    std::vector<std::string> row;
    columns(k, [&](const std::string&, const auto& v) { row.push_back(csv_cell(v)); });
    t.rows.push_back(std::move(row));
  }
  out.push_back(std::move(t));
  CsvTable peers{"peers",
                 {"rank", "peer_host", "messages_sent", "messages_received", "bytes_sent",
                  "bytes_received", "sent_in_flight_s", "received_in_flight_s"},
                 {}};
  for (const auto& p : pl.peers)
    peers.rows.push_back({csv_cell(p.rank), p.peer_host, csv_cell(p.messages_sent),
                          csv_cell(p.messages_received), csv_cell(p.bytes_sent),
                          csv_cell(p.bytes_received), csv_cell(p.sent_in_flight_s),
                          csv_cell(p.received_in_flight_s)});
  if (!pl.peers.empty()) out.push_back(std::move(peers));
  CsvTable links{"links",
                 {"host", "bytes_out", "bytes_in", "messages", "in_flight_s", "bytes_per_s",
                  "others_bytes_per_s", "slow"},
                 {}};
  for (const auto& l : pl.links)
    links.rows.push_back({l.host, csv_cell(l.bytes_out), csv_cell(l.bytes_in),
                          csv_cell(l.messages), csv_cell(l.in_flight_s), csv_cell(l.bytes_per_s),
                          csv_cell(l.others_bytes_per_s), csv_cell(l.host == pl.slow_link)});
  if (!pl.links.empty()) out.push_back(std::move(links));
}

void summarise(const Pipeline* p, Summary& out) {
  out.add("ranks", p, &Pipeline::ranks);
  out.add("producers", p, &Pipeline::producers);
  out.add("streamers", p, &Pipeline::streamers);
  out.add("writer_ranks", p, &Pipeline::writer_ranks);
  out.add("synthetic_vis", p, &Pipeline::synthetic_vis);
  out.add("network_only", p, &Pipeline::network_only);
  out.add("slowest_rank", p, &Pipeline::slowest_rank);
  out.add("bound", p, &Pipeline::bound);
  out.add("slow_link", p, &Pipeline::slow_link);
}

// transit: in situ or in transit

json to_json(const Transit& t) {
  return {{"placement", t.placement},
          {"files_split_by", t.files_split_by},
          {"writer_ranks", t.writer_ranks},
          {"writers_per_rank", t.writers_per_rank},
          {"transit_queue", t.transit_queue},
          {"chunks_sent", t.chunks_sent},
          {"bytes_sent", t.bytes_sent},
          {"chunks_kept", t.chunks_kept},
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

std::string render_text(const Transit& t, const Report& r) {
  std::string s;
  if (t.writer_ranks > 0)
    s += fmt::format(
        "  in transit: {} chunks ({}) sent to {} writer rank(s), {}/s; waits: degridding on the "
        "queue {:.2f} s, sends on the writer group {:.2f} s, writer ranks idle {:.2f} s and on "
        "their writers {:.2f} s; bound by the {}\n",
        t.chunks_sent, bytes_text(static_cast<double>(t.bytes_sent)), t.writer_ranks,
        bytes_text(t.bytes_per_s), t.streamer_queue_wait_s, t.send_wait_s, t.writer_idle_s,
        t.writer_queue_wait_s, bound_text(t.bound, r));
  else if (t.files_split_by == "frequency")
    s += fmt::format(
        "  in situ, each output a frequency range: {} chunks ({}) exchanged between the "
        "streamers, {} kept for their own files; degridding waited {:.2f} s on the queue, "
        "sends {:.2f} s; bound by the {}\n",
        t.chunks_sent, bytes_text(static_cast<double>(t.bytes_sent)), t.chunks_kept,
        t.streamer_queue_wait_s, t.send_wait_s, bound_text(t.bound, r));
  else
    s += fmt::format(
        "  in situ: degridding waited {:.2f} s on the writers' queues; bound by the {}\n",
        t.streamer_queue_wait_s, bound_text(t.bound, r));
  s += fmt::format(
      "  a streamer makes {}/s of chunks, a writer writes {}/s: {} writer rank(s) of {} "
      "writer(s) would keep pace (--writer-ranks)\n",
      bytes_text(t.compute_bytes_per_s), bytes_text(t.write_bytes_per_s), t.suggested_writer_ranks,
      std::max(1, t.writers_per_rank));
  return s;
}

void summarise(const Transit* t, Summary& out) {
  out.add("placement", t, &Transit::placement);
  out.add("transit_bytes_per_s", t, &Transit::bytes_per_s);
  out.add("transit_bound", t, &Transit::bound);
  out.add("suggested_writer_ranks", t, &Transit::suggested_writer_ranks);
}

// repetitions, with a row per repetition and figure

json to_json(const Repetitions& p) {
  json figures = json::object();
  for (const auto& f : p.figures)
    figures[f.name] = {{"values", f.values}, {"min", f.min}, {"median", f.median}, {"max", f.max}};
  return {{"count", p.count}, {"figures", figures}};
}

std::string render_text(const Repetitions& p, const Report&) {
  std::string s = fmt::format(
      "  {} repetitions (the figures above are the last's):\n    {:<28} {:>10} "
      "{:>10} {:>10}\n",
      p.count, "figure", "min", "median", "max");
  for (const auto& f : p.figures)
    s += fmt::format("    {:<28} {:>10.4g} {:>10.4g} {:>10.4g}\n", f.name, f.min, f.median, f.max);
  return s;
}

// The first run of a series is its warm-up (as the SKA tender suite counts
// them): every row is kept and warmup marks it.
void csv_tables(const Repetitions& p, Tables& out) {
  CsvTable t{"repetitions", {"repetition", "warmup", "figure", "value"}, {}};
  for (size_t i = 0; i < static_cast<size_t>(std::max(0, p.count)); ++i)
    for (const auto& f : p.figures)
      if (i < f.values.size())
        t.rows.push_back(
            {csv_cell(i), csv_cell(i == 0 && p.count > 1), f.name, csv_cell(f.values[i])});
  out.push_back(std::move(t));
}

void summarise(const Repetitions* p, Summary& out) {
  out.add("repetitions", p, &Repetitions::count);
}

// image: the dirty image as a file

json to_json(const ImageFile& f) {
  return {{"path", f.path},
          {"format", f.format},
          {"used_size", f.used_size},
          {"bytes", f.bytes},
          {"write_s", f.write_s},
          {"wall_s", f.wall_s},
          {"writer_rank", f.writer_rank}};
}

std::string render_text(const ImageFile& f, const Report& r) {
  return fmt::format(
      "  dirty image -> {} ({}, {} x {} pixels, {}; written in {:.3f} s{})\n", f.path,
      f.format == "fits" ? "FITS" : "HDF5", f.used_size, f.used_size, bytes_text(f.bytes), f.wall_s,
      r.mode == "run" ? fmt::format(" by rank {}, after the walk", f.writer_rank) : std::string());
}

// stonewall

json to_json(const Stonewall& w) {
  return {{"duration_s", w.duration_s},
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

std::string render_text(const Stonewall& w, const Report&) {
  return fmt::format(
      "  stonewall {:g} s{}: {} of {} visibilities ({:.3g} %), {} of {} visits walked, {} of "
      "{} parts degridded whole; the whole observation would take {:.3g} s on these ranks\n",
      w.duration_s, w.ended_early ? "" : " (the walk ended first)", w.visibilities_done,
      w.visibilities_total, 100 * w.fraction, w.visits_walked, w.visits_total, w.parts_done,
      w.parts_total, w.projected_s);
}

void summarise(const Stonewall* w, Summary& out) {
  out.add("stonewall_s", w, &Stonewall::duration_s);
  out.add("stonewall_fraction", w, &Stonewall::fraction);
  out.add("projected_s", w, &Stonewall::projected_s);
}

// timeline, with a row per rank and interval

json to_json(const Timeline& t) {
  json ranks = json::array();
  for (const auto& k : t.ranks)
    ranks.push_back({{"rank", k.rank},
                     {"role", k.role},
                     {"host", k.host},
                     {"busy_s", k.busy_s},
                     {"wait_s", k.wait_s},
                     {"visibilities", k.visibilities},
                     {"bytes_sent", k.bytes_sent},
                     {"bytes_written", k.bytes_written}});
  return {{"interval_s", t.interval_s}, {"start_s", 0.0}, {"ranks", ranks}};
}

// idle_s is the rest of the interval (never below 0: timing jitter can
// make busy + wait overshoot it); a figure a rank lacks is empty.
void csv_tables(const Timeline& t, Tables& out) {
  CsvTable table{"timeline",
                 {"rank", "role", "host", "interval", "start_s", "busy_s", "wait_s", "idle_s",
                  "visibilities", "bytes_sent", "bytes_written"},
                 {}};
  for (const auto& k : t.ranks) {
    const size_t n = std::max({k.busy_s.size(), k.wait_s.size(), k.visibilities.size(),
                               k.bytes_sent.size(), k.bytes_written.size()});
    const auto cell = [](const auto& v, size_t i) {
      return i < v.size() ? csv_cell(v[i]) : std::string();
    };
    for (size_t i = 0; i < n; ++i) {
      const bool both = i < k.busy_s.size() && i < k.wait_s.size();
      table.rows.push_back(
          {csv_cell(k.rank), k.role, k.host, csv_cell(i),
           csv_cell(static_cast<double>(i) * t.interval_s), cell(k.busy_s, i), cell(k.wait_s, i),
           both ? csv_cell(std::max(0.0, t.interval_s - k.busy_s[i] - k.wait_s[i])) : std::string(),
           cell(k.visibilities, i), cell(k.bytes_sent, i), cell(k.bytes_written, i)});
    }
  }
  out.push_back(std::move(table));
}

}  // namespace iotest::report::detail
