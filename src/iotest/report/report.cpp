#include "iotest/report/report.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"
#include "iotest/report/sections.hpp"

namespace iotest::report {

std::string Advice::NodeGroup::nodes_text() const {
  return node_count == 1 ? fmt::format("node {}", first_node)
                         : fmt::format("nodes {}-{}", first_node, first_node + node_count - 1);
}

namespace detail {

json number_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

std::string bytes_text(index_t b) {
  return bytes_text(static_cast<double>(b));
}

std::string error_text(double v) {
  return std::isfinite(v) ? fmt::format("{:.2e}", v) : "-";
}

std::string csv_cell(double v) {
  return std::isnan(v) ? std::string() : fmt::format("{}", v);  // the shortest that round-trips
}

std::string csv_cell(bool v) {
  return v ? "true" : "false";
}

std::string csv_cell(const std::string& v) {
  return v;
}

std::string csv_cell(const char* v) {
  return v;
}

namespace {
template <auto member>
bool has(const Report& r) {
  return (r.*member).has_value();
}
}  // namespace

// The sections, in the order of the text. Adding one: its struct (a member
// of Report), its functions in a sections_*.cpp (declared in sections.hpp)
// and its entry here.
const std::vector<Section>& sections() {
  static const std::vector<Section> list = {
      {.key = "schema_version", .to_json = schema_version_json},
      {.key = "mode", .to_json = mode_json, .summary = mode_summary},
      // The body of a computing command's report, in order.
      {.key = "config", .to_json = config_json, .text = config_text, .summary = config_summary},
      {.key = "accuracy",
       .to_json = json_of<&Report::accuracy>,
       .text = text_of<&Report::accuracy>,
       .summary = summary_of<&Report::accuracy>},
      {.text = kernel_text},  // the settings' kernel (its JSON is config's)
      {.key = "rates",
       .to_json = json_of<&Report::rates>,
       .text = text_of<&Report::rates>,
       .summary = summary_of<&Report::rates>},
      {.key = "counts", .to_json = counts_json, .text = counts_text, .summary = counts_summary},
      {.key = "image", .to_json = json_of<&Report::image>, .text = text_of<&Report::image>},
      {.key = "timing",
       .to_json = timing_json,
       .text = text_of<&Report::timing>,
       .summary = summary_of<&Report::timing>},
      {.key = "observation",
       .to_json = json_of<&Report::observation>,
       .text = text_of<&Report::observation>},
      {.key = "device", .to_json = json_of<&Report::device>, .text = text_of<&Report::device>},
      {.key = "pipeline",
       .to_json = json_of<&Report::pipeline>,
       .text = text_of<&Report::pipeline>,
       .tables = tables_of<&Report::pipeline>,
       .summary = summary_of<&Report::pipeline>},
      {.key = "transit",
       .to_json = json_of<&Report::transit>,
       .text = text_of<&Report::transit>,
       .summary = summary_of<&Report::transit>},
      {.key = "repetitions",
       .to_json = json_of<&Report::repetitions>,
       .text = text_of<&Report::repetitions>,
       .tables = tables_of<&Report::repetitions>,
       .summary = summary_of<&Report::repetitions>},
      {.key = "stonewall",
       .to_json = json_of<&Report::stonewall>,
       .text = text_of<&Report::stonewall>,
       .summary = summary_of<&Report::stonewall>},
      {.key = "memory", .to_json = memory_json, .text = memory_text, .summary = memory_summary},
      {.key = "advice",
       .to_json = json_of<&Report::advice>,
       .text = text_of<&Report::advice>,
       .summary = summary_of<&Report::advice>},
      {.key = "prediction",
       .to_json = json_of<&Report::prediction>,
       .text = text_of<&Report::prediction>,
       .summary = summary_of<&Report::prediction>},
      {.key = "sky", .to_json = json_of<&Report::sky>},
      {.key = "timeline",
       .to_json = json_of<&Report::timeline>,
       .tables = tables_of<&Report::timeline>},
      // Reports of their own kind: the first that holds is the whole body.
      {.key = "net",
       .to_json = json_of<&Report::interconnect>,
       .text = text_of<&Report::interconnect>,
       .whole = has<&Report::interconnect>,
       .tables = tables_of<&Report::interconnect>},
      {.key = "scale",
       .to_json = json_of<&Report::scaling>,
       .text = text_of<&Report::scaling>,
       .whole = has<&Report::scaling>,
       .tables = tables_of<&Report::scaling>},
      {.key = "h5",
       .to_json = json_of<&Report::checkpoint>,
       .text = text_of<&Report::checkpoint>,
       .whole = has<&Report::checkpoint>,
       .tables = tables_of<&Report::checkpoint>,
       .summary = summary_of<&Report::checkpoint>},
      // Another command's read-back is a line of its timing.
      {.key = "read",
       .to_json = json_of<&Report::reading>,
       .text = text_of<&Report::reading>,
       .whole = [](const Report& r) { return r.reading && r.mode == "read"; },
       .tables = tables_of<&Report::reading>,
       .summary = summary_of<&Report::reading>},
      {.key = "verification",
       .to_json = json_of<&Report::verification>,
       .text = text_of<&Report::verification>,
       .whole = has<&Report::verification>,
       .summary = summary_of<&Report::verification>},
      {.key = "layout",
       .to_json = json_of<&Report::layout>,
       .text = text_of<&Report::layout>,
       .whole = has<&Report::layout>},
      // Every report's last lines.
      {.key = "environment",
       .to_json = json_of<&Report::environment>,
       .text = text_of<&Report::environment>,
       .footer = true,
       .summary = summary_of<&Report::environment>},
  };
  return list;
}

}  // namespace detail

using detail::bytes_text;
using detail::json;
using detail::sections;

json to_json(const Report& r) {
  json j;
  for (const auto& s : sections())
    if (s.key && s.to_json)
      if (json v = s.to_json(r); !v.is_null()) j[s.key] = std::move(v);
  return j;
}

namespace {
// The whole body of a report of a section's own kind, or the sections' lines in order.
std::string render_body(const Report& r) {
  for (const auto& s : sections())
    if (s.whole && s.whole(r)) return s.text(r);
  std::string body;
  for (const auto& s : sections())
    if (s.text && !s.whole && !s.footer) body += s.text(r);
  return body;
}
}  // namespace

std::string render_text(const Report& r) {
  std::string text = render_body(r);
  for (const auto& s : sections())
    if (s.footer) text += s.text(r);
  return text;
}

std::vector<CsvTable> csv_tables(const Report& r) {
  detail::Summary summary;
  for (const auto& s : sections())
    if (s.summary) s.summary(r, summary);
  std::vector<CsvTable> tables = {{"summary", summary.header, {summary.row}}};
  for (const auto& s : sections())
    if (s.tables) s.tables(r, tables);
  return tables;
}

namespace {
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string quoted = "\"";
  for (const char c : v) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

void append_csv_row(std::string& out, const std::vector<std::string>& row) {
  for (size_t i = 0; i < row.size(); ++i) {
    if (i > 0) out += ',';
    out += csv_field(row[i]);
  }
  out += "\r\n";
}
}  // namespace

std::string to_csv(const CsvTable& table) {
  std::string out;
  append_csv_row(out, table.header);
  for (const auto& row : table.rows) append_csv_row(out, row);
  return out;
}

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
         : pl.synthetic_order == "sequential"
             ? "  synthetic visibilities (storage only), sequential: no walk, every chunk "
               "whole in file order (the storage ceiling)\n"
             : "  synthetic visibilities (storage only): no producers, no degridding, a pattern "
               "written as the real run would\n";
  s += fmt::format("  memory estimate: producer {}, streamer {}{}{}\n",
                   bytes_text(static_cast<double>(r.memory.producer_bytes)),
                   bytes_text(static_cast<double>(r.memory.streamer_bytes)),
                   r.memory.streamer_gpu_bytes > 0
                       ? " (and on its GPU " + bytes_text(r.memory.streamer_gpu_bytes) + ")"
                       : std::string(),
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
  if (imaging && r.observation && detail::image_leaves_rows_out(*r.observation, r))
    where +=
        fmt::format(" ({} of them: the cross-correlations)", *r.observation->visibilities_imaged);
  if (imaging && r.settings->direction == "both")
    where += " (the residual: observed minus the model degridded from the facets)";
  if (imaging && r.image) where += " -> " + r.image->path;
  if (r.observation)
    s += fmt::format("  {} visibilities ({}) of {} over {} subgrids {}\n",
                     r.counts.visibilities.value_or(0),
                     bytes_text(static_cast<double>(r.observation->visibility_bytes)),
                     r.observation->vis_set, r.counts.subgrids_used.value_or(0), where);
  return s;
}

namespace {
// A file written beside its final name and renamed into place. Anything
// else is written directly: devices and pipes, and a symlink (renaming
// would replace the link: /dev/stdout, a link to the file the shell
// redirected to, would become a plain file).
bool is_regular_or_absent(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode);
}
// This process's own: the host and process, so two runs writing the same
// report (on one host or two) never write into one temporary file.
std::string temp_name(const std::string& path) {
  return path + ".tmp." + host_name() + "." + std::to_string(::getpid());
}
}  // namespace

void check_writable(const std::string& path, const std::string& option) {
  if (path.empty()) throw UsageError(option, "expected a file name, got an empty one");
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))  // W_OK alone would pass it
    throw UsageError(option, "expected a file name, got the folder '" + path + "'");
  if (!is_regular_or_absent(path)) {
    if (::access(path.c_str(), W_OK) != 0)
      throw UsageError(option, "cannot write '" + path + "': " + std::strerror(errno));
    return;
  }
  // Probe with the temporary name the final write will use.
  const std::string tmp = temp_name(path);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw UsageError(option, "cannot write '" + path + "': " + std::strerror(errno));
  std::fclose(f);
  std::remove(tmp.c_str());
}

namespace {
// A regular file is written beside its final name and renamed into place;
// devices and pipes directly. Throws std::runtime_error naming `option`.
void write_text(const std::string& text, const std::string& path, const std::string& option) {
  const bool direct = !is_regular_or_absent(path);
  const std::string target = direct ? path : temp_name(path);
  std::FILE* f = std::fopen(target.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f) ok = (std::fclose(f) == 0) && ok;
  if (ok && !direct) ok = std::rename(target.c_str(), path.c_str()) == 0;
  if (!ok) {
    const std::string why = std::strerror(errno);
    if (!direct) std::remove(target.c_str());
    throw std::runtime_error(option + ": writing '" + path + "' failed: " + why);
  }
}
}  // namespace

void write_json(const Report& report, const std::string& path) {
  write_text(to_json(report).dump(2) + "\n", path, "--report");
}

std::vector<std::string> write_csv(const Report& report, const std::string& prefix) {
  if (prefix.empty()) throw std::runtime_error("--csv: expected a file name prefix, got none");
  std::vector<std::string> paths;
  for (const auto& table : csv_tables(report)) {
    const std::string path = prefix + "." + table.name + ".csv";
    write_text(to_csv(table), path, "--csv");
    paths.push_back(path);
  }
  return paths;
}

}  // namespace iotest::report
