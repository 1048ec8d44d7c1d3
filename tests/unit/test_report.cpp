// The report model serialises to the documented JSON keys and renders text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "iotest/commands/plan.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/report/report.hpp"

namespace iotest::report {
namespace {

Report plan(const char* rec_set, index_t nodes = 1, bool assigner = false) {
  commands::PlanOptions o;
  o.rec_set = rec_set;
  o.nodes = nodes;
  o.assigner = assigner;
  return commands::plan(o);
}

TEST(Report, PlanCarriesCountsConfigAndMemory) {
  const auto r = plan("small", 1, true);
  const auto j = to_json(r);
  EXPECT_EQ(j["mode"], "plan");
  EXPECT_EQ(j["counts"]["facets"], 9);
  EXPECT_EQ(j["counts"]["subgrids"], r.rec.subgrid_count());
  EXPECT_EQ(j["config"]["N"], 16384);
  EXPECT_EQ(j["config"]["yN"], 8192);
  EXPECT_EQ(j["config"]["xM"], 512);
  EXPECT_EQ(j["memory"]["image_bytes"], index_t{16384} * 16384 * 16);
  EXPECT_EQ(j["advice"]["recommended_ranks"], 11);  // 9 producers, a streamer, the assigner
  EXPECT_EQ(j["advice"]["layout"][0]["producers"], 9);
  EXPECT_FALSE(j.contains("accuracy"));
  EXPECT_NE(render_text(r).find("16k-8k-512"), std::string::npos);
}

TEST(Report, AccuracyIsNullWhenNotMeasured) {
  Report r = plan("T05_");
  r.mode = "recombine";
  r.accuracy = Accuracy{};
  r.accuracy->subgrid_rmse = 1e-12;
  const auto j = to_json(r);
  EXPECT_EQ(j["accuracy"]["subgrid_rmse"], 1e-12);
  EXPECT_TRUE(j["accuracy"]["facet_rmse_max"].is_null());
  EXPECT_NE(j["accuracy"]["definition"].get<std::string>().find("RMS(reference)"),
            std::string::npos);
}

// A storage-only run says so in JSON and text, and carries no accuracy;
// a verification of a synthetic set says what it compared with.
TEST(Report, SyntheticRunAndVerificationSaySo) {
  Report r = plan("T05_");
  r.mode = "run";
  r.settings = RunSettings{};
  r.settings->backend = "hdf5";
  r.settings->output = "out%d.h5";
  r.timing = Timing{};
  r.rates = Rates{};
  r.pipeline = Pipeline{};
  r.pipeline->synthetic_vis = true;
  r.pipeline->bound = "storage";
  auto j = to_json(r);
  EXPECT_EQ(j["pipeline"]["synthetic_vis"], true);
  EXPECT_EQ(j["config"]["backend"], "hdf5");
  EXPECT_FALSE(j.contains("accuracy"));
  EXPECT_NE(render_text(r).find("synthetic visibilities"), std::string::npos);
  EXPECT_NE(render_run_plan(r).find("synthetic visibilities"), std::string::npos);
  r.pipeline->synthetic_vis = false;
  EXPECT_EQ(to_json(r)["pipeline"]["synthetic_vis"], false);

  Report v;
  v.mode = "verify";
  v.verification = Verification{};
  v.verification->files = {"a.h5"};
  v.verification->chunks_expected = v.verification->chunks_present = 4;
  v.verification->tolerance = 1e-6;
  v.verification->synthetic = true;
  v.verification->passed = true;
  v.accuracy = Accuracy{};
  v.accuracy->vis_rmse = 0;
  v.accuracy->vis_samples = 4;
  j = to_json(v);
  EXPECT_EQ(j["verification"]["synthetic"], true);
  EXPECT_NE(render_text(v).find("synthetic pattern"), std::string::npos);
}

TEST(Report, WritesAtomicallyAndRejectsUnwritablePaths) {
  const std::string path = ::testing::TempDir() + "iotest_report_test.json";
  write_json(plan("T05_", 2), path);
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["advice"]["nodes"], 2);
  std::remove(path.c_str());
  EXPECT_THROW(check_writable("/nonexistent-dir/x.json"), UsageError);
  EXPECT_NO_THROW(check_writable("/dev/stdout"));
}

TEST(Report, PlanRejectsBadNodeCounts) {
  EXPECT_THROW(plan("T05_", 0), UsageError);
}

// A run of two ranks (one on a host whose name holds a comma) with a time
// line of three intervals.
Report small_run() {
  Report r;
  r.mode = "run";
  r.pipeline = Pipeline{};
  r.pipeline->ranks = 2;
  r.pipeline->bound = "degridding";
  RankStats producer;
  producer.rank = 0;
  producer.role = "producer";
  producer.host = "node,1";
  producer.busy_s = 1.5;
  producer.wait_s = 0.25;
  producer.cpu_s = std::nan("");  // not measured
  producer.bytes_sent = 1048576;
  producer.send_queue_max = 8;
  producer.stages.facet_s = 0.125;
  RankStats streamer;
  streamer.rank = 1;
  streamer.role = "streamer";
  streamer.host = "node2";
  streamer.busy_s = 2;
  streamer.idle_s = 0.1;
  streamer.cpu_s = 1.75;
  streamer.bytes_received = 1048576;
  streamer.bytes_written = 4096;
  streamer.chunks_written = 3;
  streamer.write_s = 0.5;
  streamer.peak_rss_bytes = 123456789;
  streamer.stages.degrid_task_s = 0.75;
  r.pipeline->per_rank = {producer, streamer};
  r.timeline = Timeline{};
  r.timeline->interval_s = 0.5;
  r.timeline->ranks = {{0,
                        "producer",
                        "node,1",
                        {0.5, 0.25, 0.75},
                        {0, 0.125, 0},
                        {0, 0, 0},
                        {100, 200, 0},
                        {0, 0, 0}},
                       {1,
                        "streamer",
                        "node2",
                        {0.125, 0.5, 0.25},
                        {0.25, 0, 0},
                        {10, 20, 30},
                        {0, 0, 0},
                        {64, 128, 0}}};
  return r;
}

const CsvTable& table(const std::vector<CsvTable>& tables, const std::string& name) {
  for (const auto& t : tables)
    if (t.name == name) return t;
  throw std::runtime_error("no table " + name);
}

std::vector<std::string> names(const std::vector<CsvTable>& tables) {
  std::vector<std::string> out;
  for (const auto& t : tables) out.push_back(t.name);
  return out;
}

// The value of `column` in row `row` of a table.
std::string cell(const CsvTable& t, size_t row, const std::string& column) {
  const auto at = std::find(t.header.begin(), t.header.end(), column);
  if (at == t.header.end()) throw std::runtime_error("no column " + column);
  return t.rows.at(row).at(static_cast<size_t>(at - t.header.begin()));
}

TEST(ReportCsv, RunHasItsRanksAndTimeLine) {
  const auto tables = csv_tables(small_run());
  EXPECT_EQ(names(tables), (std::vector<std::string>{"summary", "ranks", "timeline"}));

  const auto& ranks = table(tables, "ranks");
  const std::vector<std::string> first = {"rank",   "role",   "host",  "busy_s",
                                          "wait_s", "idle_s", "cpu_s", "messages_sent"};
  EXPECT_TRUE(std::equal(first.begin(), first.end(), ranks.header.begin()));
  for (const char* column :
       {"bytes_sent", "bytes_received", "bytes_written", "chunks_written", "write_s", "sync_s",
        "open_s", "send_queue_max", "peak_rss_bytes", "facet_s", "degrid_task_s"})
    EXPECT_NE(std::find(ranks.header.begin(), ranks.header.end(), column), ranks.header.end())
        << column;
  ASSERT_EQ(ranks.rows.size(), 2u);
  for (const auto& row : ranks.rows) EXPECT_EQ(row.size(), ranks.header.size());
  EXPECT_EQ(cell(ranks, 0, "rank"), "0");
  EXPECT_EQ(cell(ranks, 0, "role"), "producer");
  EXPECT_EQ(cell(ranks, 0, "host"), "node,1");
  EXPECT_EQ(cell(ranks, 0, "busy_s"), "1.5");
  EXPECT_EQ(cell(ranks, 0, "wait_s"), "0.25");
  EXPECT_EQ(cell(ranks, 0, "cpu_s"), "");  // NaN: empty
  EXPECT_EQ(cell(ranks, 0, "bytes_sent"), "1048576");
  EXPECT_EQ(cell(ranks, 0, "send_queue_max"), "8");
  EXPECT_EQ(cell(ranks, 0, "facet_s"), "0.125");
  EXPECT_EQ(cell(ranks, 1, "busy_s"), "2");
  EXPECT_EQ(cell(ranks, 1, "idle_s"), "0.1");
  EXPECT_EQ(cell(ranks, 1, "cpu_s"), "1.75");
  EXPECT_EQ(cell(ranks, 1, "bytes_written"), "4096");
  EXPECT_EQ(cell(ranks, 1, "write_s"), "0.5");
  EXPECT_EQ(cell(ranks, 1, "peak_rss_bytes"), "123456789");
  EXPECT_EQ(cell(ranks, 1, "degrid_task_s"), "0.75");

  // As CSV: the header row, then each rank, the comma's host quoted.
  const std::string csv = to_csv(ranks);
  std::istringstream lines(csv);
  std::string header, row0, row1;
  std::getline(lines, header);
  std::getline(lines, row0);
  std::getline(lines, row1);
  EXPECT_EQ(header.substr(0, 49), "rank,role,host,busy_s,wait_s,idle_s,cpu_s,message");
  EXPECT_EQ(row0.substr(0, 39), "0,producer,\"node,1\",1.5,0.25,0,,0,0,104");
  EXPECT_EQ(row1.substr(0, 32), "1,streamer,node2,2,0,0.1,1.75,0,");
  EXPECT_EQ(header.back(), '\r');  // RFC 4180: CRLF

  const auto& timeline = table(tables, "timeline");
  EXPECT_EQ(timeline.header, (std::vector<std::string>{
                                 "rank", "role", "host", "interval", "start_s", "busy_s", "wait_s",
                                 "idle_s", "visibilities", "bytes_sent", "bytes_written"}));
  ASSERT_EQ(timeline.rows.size(), 6u);  // 2 ranks x 3 intervals
  EXPECT_EQ(timeline.rows[0], (std::vector<std::string>{"0", "producer", "node,1", "0", "0", "0.5",
                                                        "0", "0", "0", "100", "0"}));
  EXPECT_EQ(timeline.rows[1],
            (std::vector<std::string>{"0", "producer", "node,1", "1", "0.5", "0.25", "0.125",
                                      "0.125", "0", "200", "0"}));
  // busy + wait over the interval: idle is 0, not negative.
  EXPECT_EQ(cell(timeline, 2, "idle_s"), "0");
  EXPECT_EQ(timeline.rows[5], (std::vector<std::string>{"1", "streamer", "node2", "2", "1", "0.25",
                                                        "0", "0.25", "30", "0", "0"}));
  EXPECT_EQ(cell(timeline, 3, "bytes_written"), "64");
  EXPECT_EQ(cell(timeline, 3, "wait_s"), "0.25");
}

// One row, the same columns whatever the report holds, each named once.
TEST(ReportCsv, SummaryHasTheSameColumnsForEveryReport) {
  const auto run = table(csv_tables(small_run()), "summary");
  const auto planned = table(csv_tables(plan("T05_")), "summary");
  EXPECT_EQ(run.header, planned.header);
  EXPECT_EQ(std::set<std::string>(run.header.begin(), run.header.end()).size(), run.header.size());
  ASSERT_EQ(run.rows.size(), 1u);
  EXPECT_EQ(run.rows[0].size(), run.header.size());
  EXPECT_EQ(cell(run, 0, "mode"), "run");
  EXPECT_EQ(cell(run, 0, "bound"), "degridding");
  EXPECT_EQ(cell(run, 0, "ranks"), "2");
  EXPECT_EQ(cell(run, 0, "wall_s"), "");  // no timing section
  EXPECT_EQ(cell(planned, 0, "mode"), "plan");
  EXPECT_EQ(cell(planned, 0, "rec_set"), "T05_");
  EXPECT_EQ(cell(planned, 0, "bound"), "");
  for (const char* column : {"stream_s", "vis_per_s", "write_bytes_per_s", "subgrid_rmse_max",
                             "vis_rmse", "peak_rss_bytes", "repetitions", "git_revision"})
    EXPECT_NE(std::find(run.header.begin(), run.header.end(), column), run.header.end()) << column;
}

TEST(ReportCsv, RepetitionsMarkTheFirstAsWarmUp) {
  std::vector<Report> runs(3, small_run());
  for (int i = 0; i < 3; ++i) {
    runs[i].timing = Timing{};
    runs[i].timing->stream_s = 1.0 + i;
  }
  const auto tables = csv_tables(with_repetitions(runs));
  const auto& reps = table(tables, "repetitions");
  EXPECT_EQ(reps.header, (std::vector<std::string>{"repetition", "warmup", "figure", "value"}));
  ASSERT_EQ(reps.rows.size(), 3u);  // one figure measured
  EXPECT_EQ(reps.rows[0], (std::vector<std::string>{"0", "true", "timing.stream_s", "1"}));
  EXPECT_EQ(reps.rows[1], (std::vector<std::string>{"1", "false", "timing.stream_s", "2"}));
  EXPECT_EQ(reps.rows[2], (std::vector<std::string>{"2", "false", "timing.stream_s", "3"}));
  EXPECT_EQ(cell(table(tables, "summary"), 0, "repetitions"), "3");
}

// Three hosts, two ranks each (a producer and a streamer); every producer
// sends `bytes` to every streamer, taking seconds_per_byte(from, to) each.
Pipeline three_hosts(double slow_factor, int hosts = 3) {
  Pipeline pl;
  const auto host = [](int h) { return "node" + std::to_string(h + 1); };
  for (int h = 0; h < hosts; ++h) {
    pl.per_rank.push_back({});
    pl.per_rank.back().rank = 2 * h;
    pl.per_rank.back().host = host(h);
    pl.per_rank.push_back({});
    pl.per_rank.back().rank = 2 * h + 1;
    pl.per_rank.back().host = host(h);
  }
  const index_t bytes = 1 << 20;
  for (int from = 0; from < hosts; ++from)
    for (int to = 0; to < hosts; ++to) {
      // 1 GB/s, or slower to or from the last host.
      const double s = static_cast<double>(bytes) / 1e9 *
                       ((from == hosts - 1 || to == hosts - 1) && from != to ? slow_factor : 1);
      pl.peers.push_back({2 * from, host(to), 1, 0, bytes, 0, s, 0});
      pl.peers.push_back({2 * to + 1, host(from), 0, 1, 0, bytes, 0, s});
    }
  return pl;
}

TEST(Report, TheLinkClearlySlowerThanTheOthersIsNamed) {
  auto pl = three_hosts(5);
  judge_links(pl);
  ASSERT_EQ(pl.links.size(), 3u);
  EXPECT_EQ(pl.slow_link, "node3");
  EXPECT_NEAR(pl.links[2].bytes_per_s, 0.2e9, 1e3);
  EXPECT_NEAR(pl.links[2].others_bytes_per_s, 1e9, 1e3);
  EXPECT_EQ(pl.links[0].bytes_out, 2 << 20);
  // No link that slow, or nothing to judge one by: none.
  // A link at a third of the others' rate is within what free links do.
  for (auto [factor, hosts] : {std::pair{1.5, 3}, {1.0, 3}, {3.0, 3}, {5.0, 2}, {5.0, 1}}) {
    auto other = three_hosts(factor, hosts);
    judge_links(other);
    EXPECT_EQ(other.slow_link, "") << factor << " " << hosts;
    EXPECT_EQ(other.links.size(), hosts > 1 ? static_cast<size_t>(hosts) : 0u);
  }
}

// One pair slow (node1 <-> node3), every link free: node1's rate and
// node3's fall below a quarter of the pair between the others, but neither
// host is slow with every other host, so no link is named (a cluster
// test's free run, where a busy node's late receives slowed one pair).
TEST(Report, OneSlowPairIsNotASlowLink) {
  auto pl = three_hosts(1);
  for (auto& p : pl.peers) {
    const bool node1 = p.rank / 2 == 0 || p.peer_host == "node1";
    const bool node3 = p.rank / 2 == 2 || p.peer_host == "node3";
    if (node1 && node3 && p.rank / 2 != (p.peer_host == "node1" ? 0 : 2)) {
      p.sent_in_flight_s *= 20;
      p.received_in_flight_s *= 20;
    }
  }
  judge_links(pl);
  ASSERT_EQ(pl.links.size(), 3u);
  EXPECT_LT(pl.links[0].bytes_per_s, kSlowLinkFraction * pl.links[0].others_bytes_per_s);
  EXPECT_EQ(pl.slow_link, "");
}

TEST(ReportCsv, QuotesAsRfc4180) {
  const CsvTable t{"t", {"a", "b"}, {{"x\"y", "1,2"}, {"line\nbreak", ""}}};
  EXPECT_EQ(to_csv(t), "a,b\r\n\"x\"\"y\",\"1,2\"\r\n\"line\nbreak\",\r\n");
}

TEST(ReportCsv, WritesEachTableWholeAndNothingElse) {
  const std::string dir = ::testing::TempDir() + "iotest_csv_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Report r = small_run();
  const auto paths = write_csv(r, dir + "/run");
  EXPECT_EQ(paths, (std::vector<std::string>{dir + "/run.summary.csv", dir + "/run.ranks.csv",
                                             dir + "/run.timeline.csv"}));
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"run.summary.csv", "run.ranks.csv",
                                          "run.timeline.csv"}));  // no temporaries
  std::ifstream in(dir + "/run.ranks.csv", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, to_csv(table(csv_tables(r), "ranks")));
  std::filesystem::remove_all(dir);

  EXPECT_THROW(write_csv(r, "/nonexistent-dir/run"), std::runtime_error);
}

// The imaging rule for autocorrelations: in the JSON only where an image
// is made, and said once in the text's observation line.
TEST(Report, ObservationSaysWhetherTheImageTookTheAutocorrelations) {
  Report r = plan("T05_");
  r.mode = "grid";
  r.observation = Observation{};
  r.observation->vis_set = "lowbd2-core";
  r.observation->autocorrelations = true;
  EXPECT_FALSE(to_json(r)["observation"].contains("autocorrelations_imaged"));
  EXPECT_NE(render_text(r).find("with autocorrelations,"), std::string::npos);
  for (const bool imaged : {false, true}) {
    r.observation->autocorrelations_imaged = imaged;
    EXPECT_EQ(to_json(r)["observation"]["autocorrelations_imaged"], imaged);
    const auto text = render_text(r);
    const std::string said = imaged ? "with autocorrelations (imaged)"
                                    : "with autocorrelations (left out of the image)";
    EXPECT_NE(text.find(said), std::string::npos) << text;
    EXPECT_EQ(text.find("autocorrelations", text.find(said) + said.size()), std::string::npos);
  }
  // The rows imaged: named in the text only where some were left out.
  r.counts.visibilities = 13861;
  r.observation->visibilities_imaged = 13861;
  EXPECT_EQ(to_json(r)["observation"]["visibilities_imaged"], 13861);
  EXPECT_EQ(render_text(r).find("imaged (the cross-correlations)"), std::string::npos);
  r.observation->visibilities_imaged = 13695;
  EXPECT_NE(render_text(r).find("13695 imaged (the cross-correlations)"), std::string::npos)
      << render_text(r);
}

// The JSON holds a key for each section the report has, and no other:
// a guard on the section list.
TEST(Report, JsonHoldsExactlyTheKeysOfItsSections) {
  const auto keys = [](const Report& r) {
    const auto j = to_json(r);
    std::set<std::string> out;
    for (const auto& [key, value] : j.items()) out.insert(key);
    return out;
  };
  Report v;
  v.mode = "verify";
  v.verification = Verification{};
  EXPECT_EQ(keys(v), (std::set<std::string>{"schema_version", "mode", "config", "verification"}));

  Report all = small_run();
  all.rec = plan("T05_").rec;
  all.settings = RunSettings{};
  all.accuracy = Accuracy{};
  all.timing = Timing{};
  all.rates = Rates{};
  all.observation = Observation{};
  all.layout = LayoutDump{};
  all.sky = Sky{};
  all.verification = Verification{};
  all.reading = Reading{};
  all.checkpoint = Checkpoint{};
  all.advice = Advice{};
  all.stonewall = Stonewall{};
  all.transit = Transit{};
  all.repetitions = Repetitions{};
  all.environment = Environment{};
  all.interconnect = Interconnect{};
  all.scaling = Scaling{};
  all.device = Device{};
  EXPECT_EQ(
      keys(all),
      (std::set<std::string>{
          "schema_version", "mode",        "config",      "counts",   "accuracy",  "timing",
          "rates",          "memory",      "observation", "layout",   "sky",       "verification",
          "read",           "h5",          "advice",      "pipeline", "stonewall", "transit",
          "timeline",       "repetitions", "environment", "net",      "scale",     "device"}));
  EXPECT_EQ(names(csv_tables(all)),
            (std::vector<std::string>{"summary", "ranks", "repetitions", "timeline", "interconnect",
                                      "scaling", "scaling_fits", "checkpoint", "read_ranks"}));
}

// The output's file system in the report: in plain words everywhere, and
// on CephFS its layout and pool's replication, or why not (JSON and line).
TEST(Report, EnvironmentNamesCephItsPoolAndLayout) {
  Report r;
  r.mode = "verify";
  r.environment = Environment{};
  auto& fs = r.environment->output.emplace();
  fs.path = "/x/vis%d.h5";
  fs.mount_point = "/x";
  fs.type = "fuse.ceph-fuse";
  fs.options = "rw";
  fs.name = "ceph";
  fs.client = "fuse";
  fs.layout = FileLayout{4 << 20, 1 << 20, 4, "cephfs_data"};
  fs.replication = 2;
  auto j = to_json(r)["environment"]["output_file_system"];
  EXPECT_EQ(j["name"], "ceph");
  EXPECT_EQ(j["client"], "fuse");
  EXPECT_EQ(j["layout"], (nlohmann::json{{"object_size", 4 << 20},
                                         {"stripe_unit", 1 << 20},
                                         {"stripe_count", 4},
                                         {"pool", "cephfs_data"}}));
  EXPECT_EQ(j["replication"], 2);
  EXPECT_FALSE(j.contains("replication_unknown_why"));
  EXPECT_NE(render_text(r).find("  /x/vis%d.h5 on ceph through FUSE (fuse.ceph-fuse: rw; mounted "
                                "at /x): pool cephfs_data, 2 replicas; layout 4 MiB objects, "
                                "stripe unit 1 MiB, 4 stripes\n"),
            std::string::npos)
      << render_text(r);
  fs.replication.reset();
  fs.replication_unknown_why = "ceph CLI not found";
  j = to_json(r)["environment"]["output_file_system"];
  EXPECT_TRUE(j["replication"].is_null());
  EXPECT_EQ(j["replication_unknown_why"], "ceph CLI not found");
  EXPECT_NE(render_text(r).find("replicas unknown (ceph CLI not found)"), std::string::npos);
  // Elsewhere: no Ceph fields.
  fs.name = fs.type = "ext4";
  fs.client = "kernel";
  j = to_json(r)["environment"]["output_file_system"];
  EXPECT_FALSE(j.contains("layout") || j.contains("replication"));
  EXPECT_NE(render_text(r).find("on ext4 through the kernel's client (ext4: rw; mounted at /x)\n"),
            std::string::npos);
}

}  // namespace
}  // namespace iotest::report
