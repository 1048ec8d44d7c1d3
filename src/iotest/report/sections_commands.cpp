// The sections of the other commands: net, scale, h5, read, verify, layout
// and plan's advice. The first six are reports of their own kind: their text
// is the whole body. Each: its JSON, its text and its CSV next to each other.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "iotest/report/sections.hpp"

namespace iotest::report::detail {

namespace {
// "1 B", "8 KiB", "64 MiB"; other sizes in bytes.
std::string message_size_text(index_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, ++u;
  return fmt::format("{} {}", b, units[u]);
}

// Two decimals, or three significant digits below 1: an oversubscribed
// node's slow pairs (MPICH polls its shared memory) must not print as 0.00.
std::string figure_text(double v) {
  const int decimals =
      v > 0 && v < 1 ? std::min(9, 2 - static_cast<int>(std::floor(std::log10(v)))) : 2;
  return fmt::format("{:.{}f}", v, decimals);
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
}  // namespace

// net: the interconnect, with a row per pair, transport and size

json to_json(const Interconnect& n) {
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
                           {"messages_wrong", f.messages_wrong},
                           {"iterations", f.iterations},
                           {"warmup", f.warmup},
                           {"windows", f.windows},
                           {"window_warmup", f.window_warmup},
                           {"window", f.window}});
      }
      pair[n.transports[t]] = figures;
    }
    pairs.push_back(pair);
  }
  return {{"ranks", n.ranks},
          {"nodes", n.nodes},
          {"window", n.window},
          {"time_per_size_s", n.time_per_size_s},
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

// One table, as OSU and DiFX print theirs: a row per size, latency and
// bandwidth per transport, the mean over the pairs.
std::string render_text(const Interconnect& n, const Report&) {
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
      s += fmt::format(" {:>12} {:>14}", figure_text(latency), figure_text(bandwidth));
    }
    s += "\n";
  }
  // Where --time-per-size bound: the sizes it bound, with the counts used
  // (the fewest over the pairs), against the counts planned.
  std::string bound;
  for (size_t z = 0; z < n.sizes.size(); ++z) {
    const auto& size = n.sizes[z];
    std::string row = fmt::format("  {:<8}", message_size_text(size.bytes));
    bool fewer = false;
    for (size_t t = 0; t < n.transports.size(); ++t) {
      Interconnect::Figure least = n.pairs.empty() ? Interconnect::Figure{}
                                                   : n.pairs.front().figures[t][z];
      for (const auto& p : n.pairs) {
        const auto& f = p.figures[t][z];
        least.iterations = std::min(least.iterations, f.iterations);
        least.windows = std::min(least.windows, f.windows);
        least.window = std::min(least.window, f.window);
      }
      fewer = fewer || least.iterations < size.iterations || least.windows < size.windows ||
              least.window < n.window;
      row += fmt::format(" {:>12} {:>14}", fmt::format("{}/{}", least.iterations, size.iterations),
                         fmt::format("{}/{} x {}", least.windows, size.windows, least.window));
    }
    if (fewer) bound += row + "\n";
  }
  if (!bound.empty()) {
    s += fmt::format(
        "  --time-per-size={:g} s bound these sizes' timed counts (used/planned; windows x "
        "messages of {}; the fewest over the pairs):\n",
        n.time_per_size_s, n.window);
    s += fmt::format("  {:<8}", "size");
    for (size_t t = 0; t < n.transports.size(); ++t)
      s += fmt::format(" {:>12} {:>14}", "round trips", "windows x msgs");
    s += "\n" + bound;
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

void csv_tables(const Interconnect& n, Tables& out) {
  CsvTable table{"interconnect",
                 {"sender", "receiver", "sender_host", "receiver_host", "tcp_address", "transport",
                  "bytes", "iterations", "warmup", "windows", "window_warmup", "window", "latency_us",
                  "bandwidth_mb_per_s", "messages_checked", "messages_wrong"},
                 {}};
  for (const auto& p : n.pairs)
    for (size_t t = 0; t < n.transports.size() && t < p.figures.size(); ++t)
      for (size_t z = 0; z < n.sizes.size() && z < p.figures[t].size(); ++z) {
        const auto& size = n.sizes[z];
        const auto& f = p.figures[t][z];
        table.rows.push_back({csv_cell(p.sender), csv_cell(p.receiver), p.sender_host,
                              p.receiver_host, p.tcp_address, n.transports[t], csv_cell(size.bytes),
                              csv_cell(f.iterations), csv_cell(f.warmup), csv_cell(f.windows),
                              csv_cell(f.window_warmup), csv_cell(f.window),
                              csv_cell(f.latency_us), csv_cell(f.bandwidth_mb_per_s),
                              csv_cell(f.messages_checked), csv_cell(f.messages_wrong)});
      }
  out.push_back(std::move(table));
}

// scale: the runs and the Universal Scalability Law fitted to each stage

json to_json(const Scaling& sc) {
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
  return {{"n_by", sc.n_by}, {"points", points}, {"fits", fits}, {"plots", sc.plots}};
}

std::string render_text(const Scaling& sc, const Report&) {
  std::string s = fmt::format("iotest scale: {} runs, N = {}\n", sc.points.size(), sc.n_by);
  s += fmt::format("  {:>4} {:>6} {:>10} {:>10} {:>14} {:>14} {:>14}\n", "N", "ranks", "streamers",
                   "stream s", "visibilities/s", "network B/s", "write B/s");
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

// scaling: a row per run; scaling_fits: a row per stage.
void csv_tables(const Scaling& sc, Tables& out) {
  CsvTable points{"scaling",
                  {"n_by", "n", "ranks", "streamers", "report", "stream_s", "vis_per_s",
                   "net_bytes_per_s", "write_bytes_per_s"},
                  {}};
  for (const auto& p : sc.points)
    points.rows.push_back({sc.n_by, csv_cell(p.n), csv_cell(p.ranks), csv_cell(p.streamers),
                           p.report, csv_cell(p.stream_s), csv_cell(p.vis_per_s),
                           csv_cell(p.net_bytes_per_s), csv_cell(p.write_bytes_per_s)});
  out.push_back(std::move(points));
  CsvTable fits{"scaling_fits",
                {"stage", "unit", "gamma", "gamma_ci", "alpha", "alpha_ci", "beta", "beta_ci",
                 "peak_n", "efficiency", "sublinear", "negative"},
                {}};
  for (const auto& f : sc.fits)
    fits.rows.push_back({f.stage, f.unit, csv_cell(f.gamma), csv_cell(f.gamma_ci),
                         csv_cell(f.alpha), csv_cell(f.alpha_ci), csv_cell(f.beta),
                         csv_cell(f.beta_ci), csv_cell(f.peak_n), csv_cell(f.efficiency),
                         csv_cell(f.sublinear), csv_cell(f.negative)});
  out.push_back(std::move(fits));
}

// h5: the checkpoint kernel, with a row per phase and step

json to_json(const Checkpoint& c) {
  return {{"path", c.path},
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

std::string render_text(const Checkpoint& c, const Report&) {
  std::string s = fmt::format(
      "iotest h5: {} rank(s) in a {}x{}x{} grid, {}x{}x{} doubles each, chunks {}x{}x{}, {} "
      "step(s) of {} to {}\n",
      c.ranks, c.grid[0], c.grid[1], c.grid[2], c.domain[0], c.domain[1], c.domain[2], c.chunk[0],
      c.chunk[1], c.chunk[2], c.steps, bytes_text(static_cast<double>(c.bytes_per_step)), c.path);
  s += fmt::format("  {} transfers, metadata {}, fill {}, allocation {}{}{}\n", c.transfer,
                   c.collective_metadata ? "collective" : "independent",
                   c.never_fill ? "never" : "default", c.alloc,
                   c.precreate ? ", precreated by rank 0" : "",
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
    s += c.values_wrong == 0 ? "  every value read back: right\n"
                             : fmt::format("  {} values read back wrong: FAILED\n", c.values_wrong);
  return s;
}

// The slowest rank's seconds of each phase: creating the file, each step's
// write (with its rate), flushing and closing.
void csv_tables(const Checkpoint& c, Tables& out) {
  CsvTable t{"checkpoint", {"phase", "step", "time_s", "bytes", "bytes_per_s"}, {}};
  t.rows.push_back({"create", "", csv_cell(c.create_s), "", ""});
  for (size_t i = 0; i < c.step_s.size(); ++i) {
    const double seconds = c.step_s[i];
    t.rows.push_back(
        {"write", csv_cell(i), csv_cell(seconds), csv_cell(c.bytes_per_step),
         csv_cell(seconds > 0 ? static_cast<double>(c.bytes_per_step) / seconds : std::nan(""))});
  }
  t.rows.push_back({"close", "", csv_cell(c.close_s), "", ""});
  out.push_back(std::move(t));
}

void summarise(const Checkpoint* c, Summary& out) {
  out.add("h5_bytes", c, &Checkpoint::bytes);
  out.add("h5_write_s", c, &Checkpoint::write_s);
  out.add("h5_raw_bytes_per_s", c, &Checkpoint::raw_bytes_per_s);
  out.add("h5_aggregate_bytes_per_s", c, &Checkpoint::aggregate_bytes_per_s);
}

// read: an output read back, with a row per rank

json to_json(const Reading& d) {
  json ranks = json::array();
  for (const auto& k : d.per_rank)
    ranks.push_back({{"rank", k.rank},
                     {"host", k.host},
                     {"files", k.files},
                     {"chunks", k.chunks},
                     {"bytes", k.bytes},
                     {"open_s", k.open_s},
                     {"read_s", k.read_s}});
  json j = {{"files", d.files},
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
  if (!d.first_wrong.empty()) j["first_wrong"] = d.first_wrong;
  return j;
}

std::string render_text(const Reading& d, const Report&) {
  std::string s = fmt::format(
      "iotest read: {} file(s) ({}{}) on {} rank(s){}: {} chunks, {} in {:.3f} s = {:.3f} GB/s "
      "(inside reads {:.3f} s, opening {:.3f} s, summed over ranks)\n",
      d.files.size(), d.backend, d.direct ? ", O_DIRECT" : "", d.ranks,
      d.caches_dropped ? ", page cache dropped first" : "", d.chunks,
      bytes_text(static_cast<double>(d.bytes)), d.wall_s, d.bytes_per_s / 1e9, d.read_s, d.open_s);
  if (d.checked) {
    s += fmt::format("  {} values checked against the synthetic pattern: {} right, {} wrong",
                     d.values_checked, d.values_right, d.values_wrong);
    if (d.values_expected >= 0) s += fmt::format(", {} expected", d.values_expected);
    if (!d.first_wrong.empty()) s += fmt::format(" (first wrong: {})", d.first_wrong);
    s += d.passed ? ": passed\n" : ": FAILED\n";
  }
  return s;
}

std::string read_line(const Reading& d) {
  return fmt::format(
      "  read {} file(s) ({}{}): {} chunk reads{}, {} in {:.3f} s, {:.3g} B/s (inside reads "
      "{:.3f} s)\n",
      d.files.size(), d.backend, d.direct ? ", O_DIRECT" : "", d.chunks,
      d.chunks_stored > 0
          ? fmt::format(" of {} chunks stored ({} read again)", d.chunks_stored, d.chunks_reread)
          : std::string(),
      bytes_text(static_cast<double>(d.bytes)), d.wall_s, d.bytes_per_s, d.read_s);
}

void csv_tables(const Reading& d, Tables& out) {
  CsvTable t{"read_ranks", {"rank", "host", "files", "chunks", "bytes", "open_s", "read_s"}, {}};
  for (const auto& k : d.per_rank)
    t.rows.push_back({csv_cell(k.rank), k.host, csv_cell(k.files), csv_cell(k.chunks),
                      csv_cell(k.bytes), csv_cell(k.open_s), csv_cell(k.read_s)});
  out.push_back(std::move(t));
}

void summarise(const Reading* d, Summary& out) {
  out.add("read_bytes", d, &Reading::bytes);
  out.add("read_wall_s", d, &Reading::wall_s);
  out.add("read_bytes_per_s", d, &Reading::bytes_per_s);
  out.add("read_passed", d && d->checked ? csv_cell(d->passed) : std::string());
}

// verification

json to_json(const Verification& v) {
  json j = {{"files", v.files},
            {"chunks_expected", v.chunks_expected},
            {"chunks_present", v.chunks_present},
            {"tolerance", v.tolerance},
            {"synthetic", v.synthetic},
            {"stonewalled", v.stonewalled},
            {"nonce", v.nonce},
            {"run", {{"command_line", v.command_line}, {"started", v.started}, {"hosts", v.hosts}}},
            {"all", v.all},
            {"values_checked", v.values_checked},
            {"values_wrong", v.values_wrong},
            {"chunks_checksummed", v.chunks_checksummed},
            {"checksums_wrong", v.checksums_wrong},
            {"passed", v.passed},
            {"reason", v.reason}};
  if (v.stonewalled) {
    j["written_parts"] = v.written_parts;
    j["visibilities_written"] = v.visibilities_written;
  }
  return j;
}

std::string render_text(const Verification& v, const Report& r) {
  std::string s = fmt::format("iotest verify: {} file(s), {} of {} chunks present", v.files.size(),
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
  if (!v.started.empty())
    s += fmt::format("  made by run {} started {} on {}: {}\n", v.nonce, v.started,
                     fmt::join(v.hosts, ", "), v.command_line);
  return s;
}

void summarise(const Verification* v, Summary& out) {
  out.add("verify_passed", v, &Verification::passed);
}

// layout

json to_json(const LayoutDump& l) {
  json uvw = json::array();
  for (const auto& u : l.uvw)
    uvw.push_back({{"baseline", u.baseline},
                   {"antenna1", u.antenna1},
                   {"antenna2", u.antenna2},
                   {"time", u.time},
                   {"hour_angle_s", u.hour_angle_s},
                   {"uvw_m", {u.u, u.v, u.w}}});
  return {{"vis_set", l.vis_set},
          {"centre", {{"lon_deg", l.lon_deg}, {"lat_deg", l.lat_deg}, {"height_m", l.height_m}}},
          {"max_baseline_m", l.max_baseline_m},
          {"antennas_enu_m", l.antennas_enu},
          {"uvw", uvw}};
}

std::string render_text(const LayoutDump& l, const Report& r) {
  std::string s = fmt::format(
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

// advice: plan's ranks laid out on nodes

json to_json(const Advice& a) {
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
  if (a.gpus_per_node > 0)
    for (size_t i = 0; i < a.layout.size(); ++i) {
      layout[i]["streamers_per_gpu"] = a.layout[i].streamers_per_gpu;
      layout[i]["gpu_bytes"] = a.layout[i].gpu_bytes;
    }
  json j = {{"nodes", a.nodes},
            {"ranks_per_node", a.ranks_per_node},
            {"recommended_ranks", a.recommended_ranks},
            {"producers", a.producers},
            {"streamers", a.streamers},
            {"writer_ranks", a.writer_ranks},
            {"assigner", a.assigner},
            {"threads", a.threads},
            {"producer_threads", a.producer_threads},
            {"rule", a.rule},
            {"direction", a.direction},
            {"reads_files", a.reads_files},
            {"node_memory_bytes", a.node_memory_bytes},
            {"node_memory_source", a.node_memory_source},
            {"layout", layout},
            {"warnings", a.warnings}};
  if (a.suggested_writer_ranks) {
    j["suggested_writer_ranks"] = *a.suggested_writer_ranks;
    j["rates_from"] = a.rates_from;
  }
  if (!a.time_limit_from_prediction.empty()) {
    j["time_limit_from_prediction"] = a.time_limit_from_prediction;
    j["time_limit_margin"] = a.time_limit_margin;
  }
  if (!a.job_script.empty()) j["job_script"] = a.job_script;
  if (a.gpus_per_node > 0) {
    j["gpus_per_node"] = a.gpus_per_node;
    j["gpu_memory_bytes"] = a.gpu_memory_bytes;
    j["gpu_memory_source"] = a.gpu_memory_source;
  }
  return j;
}

namespace {

// What the streamers do with the observation's visibilities.
std::string visibilities_verb(const Advice& a) {
  if (a.direction == "predict") return "to write";
  return a.reads_files ? "to read" : "to predict in memory";
}

}  // namespace

std::string render_text(const Advice& a, const Report& r) {
  std::string s = fmt::format(
      "  ranks: {} on {} node(s), {} per node: {} producer(s) x {} thread(s), {} streamer(s) x {} "
      "thread(s), {}{}\n",
      a.recommended_ranks, a.nodes, a.ranks_per_node, a.producers, a.producer_threads, a.streamers,
      a.threads, a.writer_ranks > 0 ? fmt::format("{} writer rank(s), ", a.writer_ranks) : "",
      a.assigner ? "1 assigner" : "static assignment");
  s += fmt::format("  run: mpirun -np {} --map-by node iotest --facet-workers={}{}{} ...\n",
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
  if (a.gpus_per_node > 0) {
    s += fmt::format("  per GPU, {} a node, of {} ({}):\n", a.gpus_per_node,
                     bytes_text(a.gpu_memory_bytes), a.gpu_memory_source);
    for (const auto& g : a.layout)
      s += fmt::format("    {:<14} {:<44} {:>10}\n", g.nodes_text(),
                       fmt::format("{} streamer(s) on the busiest GPU", g.streamers_per_gpu),
                       bytes_text(g.gpu_bytes));
  }
  if (r.observation && a.streamers > 0)
    s += fmt::format("  {}: {} in all, about {} per streamer\n", visibilities_verb(a),
                     bytes_text(r.observation->visibility_bytes),
                     bytes_text(r.observation->visibility_bytes / a.streamers));
  if (!a.time_limit_from_prediction.empty())
    s += fmt::format(
        "  job's time limit {}: the predicted stream time x {:.1f}, with setup and drain\n",
        a.time_limit_from_prediction, a.time_limit_margin);
  for (const auto& w : a.warnings) s += "  warning: " + w + "\n";
  return s;
}

void summarise(const Advice* a, Summary& out) {
  out.add("nodes", a, &Advice::nodes);
  out.add("recommended_ranks", a, &Advice::recommended_ranks);
}

}  // namespace iotest::report::detail

namespace iotest::report::detail {

// prediction: plan's and run's with --calibration

json to_json(const Prediction& p) {
  json stages = json::array(), by_nodes = json::array();
  for (const auto& s : p.stages)
    stages.push_back(
        {{"name", s.name}, {"seconds", s.seconds}, {"share", s.share}, {"where", s.where}});
  for (const auto& n : p.by_nodes)
    by_nodes.push_back({{"nodes", n.nodes},
                        {"producers", n.producers},
                        {"streamers", n.streamers},
                        {"threads", n.threads},
                        {"stream_s", n.stream_s},
                        {"bound", n.bound}});
  const auto given = [](double v) { return v > 0 ? json(v) : json(nullptr); };
  json j = {{"calibration", p.calibration},
            {"calibration_host", p.calibration_host},
            {"rates",
             {{"degrid_s_per_vis", p.rates.degrid_s_per_vis},
              {"part_s", p.rates.part_s},
              {"contribution_s", p.rates.contribution_s},
              {"facet_s", p.rates.facet_s},
              {"writer_bytes_per_s", given(p.rates.writer_bytes_per_s)}}},
            {"cluster",
             {{"nodes", p.cluster.nodes},
              {"cores_per_node", p.cluster.cores_per_node},
              {"link_bytes_per_s", given(p.cluster.link_bytes_per_s)},
              {"storage_bytes_per_s", given(p.cluster.storage_bytes_per_s)}}},
            {"stages", stages},
            {"stream_s", p.stream_s},
            {"vis_per_s", p.vis_per_s},
            {"bound", p.bound},
            {"bytes_written", p.bytes_written},
            {"by_nodes", by_nodes},
            {"bound_moves_at", p.bound_moves_at > 0 ? json(p.bound_moves_at) : json(nullptr)}};
  if (p.measured_stream_s) {
    j["measured_stream_s"] = *p.measured_stream_s;
    j["measured_bound"] = p.measured_bound;
    j["error"] = p.error ? json(*p.error) : json(nullptr);
  }
  return j;
}

namespace {

std::string rate_or_none(double bytes_per_s) {
  return bytes_per_s > 0 ? bytes_text(bytes_per_s) + "/s" : "not given";
}

}  // namespace

std::string render_text(const Prediction& p, const Report&) {
  std::string s = fmt::format(
      "  predicted from {} ({}): {} node(s) of {} core(s), links {}, storage {}\n", p.calibration,
      p.calibration_host.empty() ? "one node" : p.calibration_host, p.cluster.nodes,
      p.cluster.cores_per_node, rate_or_none(p.cluster.link_bytes_per_s),
      rate_or_none(p.cluster.storage_bytes_per_s));
  s += fmt::format("    stream {:.2f} s, {:.3g} visibilities/s, bound by {}", p.stream_s,
                   p.vis_per_s, p.bound);
  for (const auto& st : p.stages)
    if (st.name == p.bound && !st.where.empty()) s += " (" + st.where + ")";
  if (p.bytes_written > 0)
    s += fmt::format("; writes {} (each chunk whole, once by each streamer holding part of it)",
                     bytes_text(p.bytes_written));
  s += "\n    each stage alone:";
  for (const auto& st : p.stages)
    s += fmt::format(" {} {:.2f} s ({:.0f} %){}", st.name, st.seconds, 100 * st.share,
                     &st == &p.stages.back() ? "" : ",");
  s += "\n";
  if (!p.by_nodes.empty()) {
    s += "    nodes  producers  streamers  threads  stream s  bound\n";
    for (const auto& n : p.by_nodes)
      s += fmt::format("    {:>5}  {:>9}  {:>9}  {:>7}  {:>8.2f}  {}\n", n.nodes, n.producers,
                       n.streamers, n.threads, n.stream_s, n.bound);
    s += p.bound_moves_at > 0 ? fmt::format("    the bound moves at {} nodes\n", p.bound_moves_at)
                              : std::string("    the bound stays over these node counts\n");
  }
  if (p.measured_stream_s)
    s += fmt::format(
        "    measured: stream {:.2f} s, bound by {}; predicted / measured - 1 = {:+.1f} %\n",
        *p.measured_stream_s, p.measured_bound, p.error ? 100 * *p.error : NAN);
  return s;
}

void summarise(const Prediction* p, Summary& out) {
  out.add("predicted_stream_s", p, &Prediction::stream_s);
  out.add("predicted_bound", p, &Prediction::bound);
}

}  // namespace iotest::report::detail
