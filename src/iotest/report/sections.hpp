// The report's sections, inside the report module (not a public header).
//
// A section is a part of a Report with its JSON key, its serialiser, its
// lines of the text, its CSV tables and its columns of the CSV summary row,
// written next to each other in one sections_*.cpp. to_json, render_text and
// csv_tables are loops over one ordered list of sections (report.cpp,
// sections()); the JSON's keys come out sorted, so the list's order is the
// text's.
//
// Adding a section:
//   1. its struct, and an std::optional of it in Report (report.hpp);
//   2. its functions in a sections_*.cpp, declared below: json to_json(const
//      T&), and as it needs std::string render_text(const T&, const Report&),
//      void csv_tables(const T&, Tables&), void summarise(const T*, Summary&);
//   3. one entry in sections() (report.cpp), at the place of its lines:
//        {.key = "mine",
//         .to_json = json_of<&Report::mine>,
//         .text = text_of<&Report::mine>,
//         .tables = tables_of<&Report::mine>,
//         .summary = summary_of<&Report::mine>},
//      (.whole for a command whose report is this section alone).
#pragma once

#include <cmath>
#include <concepts>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "iotest/report/report.hpp"

namespace iotest::report::detail {

using nlohmann::json;

// Formatting shared by the sections.
json number_or_null(double v);     // NaN and infinities: null
std::string bytes_text(double b);  // "1.5 MiB"
std::string bytes_text(index_t b);
std::string error_text(double v);  // "1.23e-08", "-" when not measured
// A CSV field: numbers as they round-trip, NaN empty, booleans true/false.
std::string csv_cell(double v);
std::string csv_cell(bool v);
std::string csv_cell(const std::string& v);
std::string csv_cell(const char* v);
template <std::integral T>
std::string csv_cell(T v) {
  return std::to_string(v);
}

// The CSV summary: one row of the report's headline figures. Every section
// adds the same columns whatever the report holds (empty where it does not
// hold the section), so summaries of any runs append into one sheet.
struct Summary {
  std::vector<std::string> header, row;
  void add(std::string column, std::string value) {
    header.push_back(std::move(column));
    row.push_back(std::move(value));
  }
  // A member of a section the report may not hold (s: nullptr).
  template <class T, class M>
  void add(std::string column, const T* s, M T::*member) {
    add(std::move(column), s ? csv_cell(s->*member) : std::string());
  }
};

using Tables = std::vector<CsvTable>;

// One entry of the section list. Each function takes the whole report (a
// section's text may quote another's figures); nullptr: the section has no
// such part.
struct Section {
  const char* key = nullptr;  // its JSON key; nullptr: its figures are in another's JSON
  json (*to_json)(const Report&) = nullptr;      // null json: not in this report (key left out)
  std::string (*text)(const Report&) = nullptr;  // its lines of the body ("": none)
  // A report of this section's own kind (net, scale, h5, read, verify,
  // layout): when it holds, the section's text is the whole body.
  bool (*whole)(const Report&) = nullptr;
  bool footer = false;  // its text ends every kind of report, after the body
  void (*tables)(const Report&, Tables&) = nullptr;    // its CSV tables
  void (*summary)(const Report&, Summary&) = nullptr;  // its columns of the summary row
};

// The sections in the order of the text.
const std::vector<Section>& sections();

// sections_common.cpp: the figures the computing commands share.
json schema_version_json(const Report& r);
json mode_json(const Report& r);
void mode_summary(const Report& r, Summary& out);
json config_json(const Report& r);  // the parameters, settings and observation
std::string config_text(const Report& r);
void config_summary(const Report& r, Summary& out);
json to_json(const StageSeconds& k);

// A rank's plain figures and the stages, each named once for the JSON
// (per_rank, stages) and the CSV (ranks): f(name, value) for each, in the
// CSV's column order.
template <class F>
void for_each_stage(const StageSeconds& k, F&& f) {
  f("facet_s", k.facet_s);
  f("column_s", k.column_s);
  f("contribution_s", k.contribution_s);
  f("assembly_s", k.assembly_s);
  f("pieces_s", k.pieces_s);
  f("tower_s", k.tower_s);
  f("degrid_task_s", k.degrid_task_s);
}
template <class F>
void for_each_rank_figure(const RankStats& k, F&& f) {
  f("rank", k.rank);
  f("role", k.role);
  f("host", k.host);
  f("busy_s", k.busy_s);
  f("wait_s", k.wait_s);
  f("idle_s", k.idle_s);
  f("cpu_s", k.cpu_s);
  f("messages_sent", k.messages_sent);
  f("messages_received", k.messages_received);
  f("bytes_sent", k.bytes_sent);
  f("bytes_received", k.bytes_received);
  f("contributions", k.contributions);
  f("subgrids", k.subgrids);
  f("visibilities", k.visibilities);
  f("w_planes", k.w_planes);
  f("bytes_written", k.bytes_written);
  f("chunks_written", k.chunks_written);
  f("chunks_rewritten", k.chunks_rewritten);
  f("write_s", k.write_s);
  f("sync_s", k.sync_s);
  f("open_s", k.open_s);
  f("peak_rss_bytes", k.peak_rss_bytes);
  f("queue_wait_s", k.queue_wait_s);
}
// Its queue high-water marks: JSON queue_high_water.<name>, CSV <name>_queue_max.
template <class F>
void for_each_queue_high_water(const RankStats& k, F&& f) {
  f("send", k.send_queue_max);
  f("subgrid", k.subgrid_queue_max);
  f("task", k.task_queue_max);
  f("visibility", k.visibility_queue_max);
}
json to_json(const Accuracy& a);
std::string render_text(const Accuracy& a, const Report& r);
void summarise(const Accuracy* a, Summary& out);
std::string kernel_text(const Report& r);  // the settings' kernel, after the accuracy
json to_json(const Rates& q);
std::string render_text(const Rates& q, const Report& r);
void summarise(const Rates* q, Summary& out);
json counts_json(const Report& r);
std::string counts_text(const Report& r);  // what was written
void counts_summary(const Report& r, Summary& out);
json timing_json(const Report& r);  // with the pipeline's roles
std::string render_text(const Timing& t, const Report& r);
void summarise(const Timing* t, Summary& out);
json to_json(const Observation& o);
std::string render_text(const Observation& o, const Report& r);
// Whether the dirty image left rows out (its autocorrelations): false
// where it took every row, or where no image was made.
bool image_leaves_rows_out(const Observation& o, const Report& r);
json memory_json(const Report& r);
std::string memory_text(const Report& r);
void memory_summary(const Report& r, Summary& out);
json to_json(const Sky& s);
json to_json(const Device& d);
std::string render_text(const Device& d, const Report& r);  // "" on the CPU
// What bound a run (Pipeline::bound, Transit::bound) in words; on GPUs
// the storage or the network holding back the GPU streamers says so.
std::string bound_text(const std::string& bound, const Report& r);
json to_json(const Environment& e);
std::string render_text(const Environment& e, const Report& r);
void summarise(const Environment* e, Summary& out);

// sections_pipeline.cpp: `iotest run`.
json to_json(const Pipeline& p);
std::string render_text(const Pipeline& p, const Report& r);
void csv_tables(const Pipeline& p, Tables& out);
void summarise(const Pipeline* p, Summary& out);
json to_json(const Transit& t);
std::string render_text(const Transit& t, const Report& r);
void summarise(const Transit* t, Summary& out);
json to_json(const Repetitions& p);
std::string render_text(const Repetitions& p, const Report& r);
void csv_tables(const Repetitions& p, Tables& out);
void summarise(const Repetitions* p, Summary& out);
json to_json(const ImageFile& f);
std::string render_text(const ImageFile& f, const Report& r);
json to_json(const Stonewall& w);
std::string render_text(const Stonewall& w, const Report& r);
void summarise(const Stonewall* w, Summary& out);
json to_json(const Timeline& t);
void csv_tables(const Timeline& t, Tables& out);
json roles_json(const Pipeline& p);  // per role: the longest busy, wait and idle

// sections_commands.cpp: the sections of the other commands.
json to_json(const Interconnect& n);
std::string render_text(const Interconnect& n, const Report& r);
void csv_tables(const Interconnect& n, Tables& out);
json to_json(const Scaling& s);
std::string render_text(const Scaling& s, const Report& r);
void csv_tables(const Scaling& s, Tables& out);
json to_json(const Checkpoint& c);
std::string render_text(const Checkpoint& c, const Report& r);
void csv_tables(const Checkpoint& c, Tables& out);
void summarise(const Checkpoint* c, Summary& out);
json to_json(const Reading& d);
std::string render_text(const Reading& d, const Report& r);  // `iotest read`'s body
std::string read_line(const Reading& d);                     // a line of another command's timing
void csv_tables(const Reading& d, Tables& out);
void summarise(const Reading* d, Summary& out);
json to_json(const Verification& v);
std::string render_text(const Verification& v, const Report& r);
void summarise(const Verification* v, Summary& out);
json to_json(const LayoutDump& l);
std::string render_text(const LayoutDump& l, const Report& r);
json to_json(const Advice& a);
std::string render_text(const Advice& a, const Report& r);
void summarise(const Advice* a, Summary& out);

json to_json(const Prediction& p);
std::string render_text(const Prediction& p, const Report& r);
void summarise(const Prediction* p, Summary& out);

// Most sections are an optional member of Report with typed functions:
//   json to_json(const T&);
//   std::string render_text(const T&, const Report&);
//   void csv_tables(const T&, Tables&);
//   void summarise(const T*, Summary&);  // nullptr: the report does not hold it
// These adapt them to a Section's (after the overloads, so that lookup finds them).
template <auto member>
json json_of(const Report& r) {
  const auto& s = r.*member;
  return s ? to_json(*s) : json();
}
template <auto member>
std::string text_of(const Report& r) {
  const auto& s = r.*member;
  return s ? render_text(*s, r) : std::string();
}
template <auto member>
void tables_of(const Report& r, Tables& out) {
  const auto& s = r.*member;
  if (s) csv_tables(*s, out);
}
template <auto member>
void summary_of(const Report& r, Summary& out) {
  const auto& s = r.*member;
  summarise(s ? &*s : nullptr, out);
}

}  // namespace iotest::report::detail
