// The model of a predicted run (prediction/prediction.hpp): each stage's
// seconds from its work and rates, the stream time, the bound, the
// calibration taken from a report, and the job's time limit from it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "iotest/common/errors.hpp"
#include "iotest/job/job_script.hpp"
#include "iotest/prediction/prediction.hpp"

namespace iotest::prediction {
namespace {

Calibration rates() {
  Calibration c;
  c.source = "calibration.json";
  c.rates.degrid_s_per_vis = 1e-6;
  c.rates.part_s = 0.01;
  c.rates.contribution_s = 0.002;
  c.rates.facet_s = 0.05;
  c.rates.writer_bytes_per_s = 100e6;
  return c;
}

// One producer on node 0 holding 4 facets; two streamers on nodes 1 and 2,
// the first with two parts of 1e6 visibilities, the second with one.
Work three_nodes() {
  Work w;
  w.producer_nodes = {0};
  w.streamer_nodes = {1, 2};
  w.facets = 4;
  w.stacks = 1;
  w.visits = 2;
  w.parts = {{1'000'000, 0}, {1'000'000, 0}, {1'000'000, 1}};
  w.contribution_bytes = 1'000'000;
  w.visibilities = 3'000'000;
  w.bytes_written = 48'000'000;  // 16 bytes a visibility
  return w;
}

const report::Prediction::Stage& stage(const report::Prediction& p, const std::string& name) {
  for (const auto& s : p.stages)
    if (s.name == name) return s;
  throw std::logic_error("no stage " + name);
}

TEST(Prediction, EachStageIsItsBusiestRanksWorkOverItsRate) {
  const auto p = predict(rates(), {3, 8, 10e6, 0}, three_nodes());
  // The producer: 4 facets x (2 visits x 2 ms + 1 stack x 50 ms).
  EXPECT_NEAR(stage(p, "producers").seconds, 4 * (2 * 0.002 + 0.05), 1e-12);
  // Streamer 0: 2 parts x 10 ms + 2e6 x 1 us.
  EXPECT_NEAR(stage(p, "degridding").seconds, 2 * 0.01 + 2.0, 1e-12);
  EXPECT_EQ(stage(p, "degridding").where, "streamer 0, node 1");
  // Node 0's link out carries 3 parts x 4 facets x 1 MB at 10 MB/s.
  EXPECT_NEAR(stage(p, "network").seconds, 12e6 / 10e6, 1e-12);
  EXPECT_EQ(stage(p, "network").where, "node 0's link out");
  // Streamer 0 writes 2/3 of 48 MB through one writer at 100 MB/s.
  EXPECT_NEAR(stage(p, "storage").seconds, 32e6 / 100e6, 1e-12);
}

TEST(Prediction, TheStreamIsTheLongestStagePlusAPartOfEachOther) {
  const auto p = predict(rates(), {3, 8, 10e6, 0}, three_nodes());
  EXPECT_EQ(p.bound, "degridding");
  double others = 0;
  for (const auto& s : p.stages)
    if (s.name != "degridding") others += s.seconds;
  // Three parts over two streamers: 1.5 parts each.
  EXPECT_NEAR(p.stream_s, 2.02 + others / 1.5, 1e-12);
  EXPECT_NEAR(p.vis_per_s, 3e6 / p.stream_s, 1e-6);
  EXPECT_NEAR(stage(p, "degridding").share, 2.02 / p.stream_s, 1e-12);
}

TEST(Prediction, SlowLinksOrStorageMoveTheBound) {
  EXPECT_EQ(predict(rates(), {3, 8, 1e6, 0}, three_nodes()).bound, "network");
  auto slow = predict(rates(), {3, 8, 10e6, 10e6}, three_nodes());
  EXPECT_EQ(slow.bound, "storage");
  EXPECT_NEAR(stage(slow, "storage").seconds, 48e6 / 10e6, 1e-12);
  EXPECT_EQ(stage(slow, "storage").where, "the storage in all");
}

TEST(Prediction, RanksOnOneNodeSendNothingOverItsLink) {
  auto w = three_nodes();
  w.producer_nodes = {0};
  w.streamer_nodes = {0, 0};
  const auto p = predict(rates(), {1, 8, 1.0, 0}, w);
  EXPECT_EQ(stage(p, "network").seconds, 0.0);
}

TEST(Prediction, ANodesCoresAreSharedByItsRanks) {
  // Both streamers on one core: each waits for the other's work too.
  auto w = three_nodes();
  w.streamer_nodes = {1, 1};
  const auto p = predict(rates(), {2, 1, 10e6, 0}, w);
  EXPECT_NEAR(stage(p, "degridding").seconds, 3 * 0.01 + 3.0, 1e-12);
  // On eight cores, each its own.
  EXPECT_NEAR(stage(predict(rates(), {2, 8, 10e6, 0}, w), "degridding").seconds, 2.02, 1e-12);
  // The producer beside them on two cores: the three share them while the
  // producer works (its 0.216 s at 2/3 of a core), then the streamers have
  // a core each.
  w.producer_nodes = {1};
  const auto shared = predict(rates(), {2, 2, 10e6, 0}, w);
  EXPECT_NEAR(stage(shared, "producers").seconds, 0.216 * 1.5, 1e-12);
  EXPECT_NEAR(stage(shared, "degridding").seconds, 0.216 * 1.5 + (2.02 - 0.216), 1e-12);
}

TEST(Prediction, ThreadsShareAStreamersWork) {
  auto w = three_nodes();
  w.threads = 2;
  EXPECT_NEAR(stage(predict(rates(), {3, 8, 10e6, 0}, w), "degridding").seconds, 1.01, 1e-12);
}

TEST(Prediction, ADryRunHasNoStorageStage) {
  auto w = three_nodes();
  w.bytes_written = 0;
  EXPECT_EQ(stage(predict(rates(), {3, 8, 10e6, 1.0}, w), "storage").seconds, 0.0);
}

TEST(Prediction, TheBoundMovesWhereTheNextCountNamesAnother) {
  using At = report::Prediction::AtNodes;
  EXPECT_EQ(bound_moves_at({At{1, 1, 1, 1, 9, "degridding"}, At{2, 1, 2, 1, 5, "degridding"},
                            At{4, 1, 4, 1, 4, "network"}}),
            4);
  EXPECT_EQ(bound_moves_at({At{1, 1, 1, 1, 9, "degridding"}}), 0);
}

TEST(PredictionRate, TakesBitsBytesAndPrefixes) {
  EXPECT_DOUBLE_EQ(parse_rate("100Gbit", "--link-rate"), 12.5e9);
  EXPECT_DOUBLE_EQ(parse_rate("400Mbit/s", "--link-rate"), 50e6);
  EXPECT_DOUBLE_EQ(parse_rate("12.5GB", "--storage-rate"), 12.5e9);
  EXPECT_DOUBLE_EQ(parse_rate("1.2e9", "--storage-rate"), 1.2e9);
  EXPECT_DOUBLE_EQ(parse_rate("800k", "--storage-rate"), 8e5);
  EXPECT_DOUBLE_EQ(parse_rate("12mbit", "--link-rate"), 1.5e6);  // tc's spelling
  EXPECT_DOUBLE_EQ(parse_rate("1gbit", "--link-rate"), 1.25e8);
  for (const char* bad : {"", "fast", "10Xbit", "-5GB", "0", "1e400"}) {
    try {
      parse_rate(bad, "--link-rate");
      ADD_FAILURE() << "took '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), "--link-rate") << bad;
    }
  }
}

nlohmann::json calibration_report() {
  return {
      {"mode", "run"},
      {"config", {{"direction", "predict"}, {"w_stacks", 2}}},
      {"observation", {{"vis_set", "vlaa"}}},
      // A stonewalled run: its counts are the observation's, its ranks' what
      // they did.
      {"counts", {{"visibilities", 5000}, {"facets", 9}, {"bytes_written", 16000}}},
      {"pipeline",
       {{"producers", 1},
        {"subgrid_parts", 20},
        {"synthetic_vis", false},
        {"network_only", false},
        {"per_rank",
         {{{"contributions", 90}, {"visibilities", 0}, {"subgrids", 0}},
          {{"contributions", 0}, {"visibilities", 600}, {"subgrids", 12}, {"queue_wait_s", 0.5}},
          {{"contributions", 0}, {"visibilities", 400}, {"subgrids", 8}}}}}},
      {"timing",
       {{"stages",
         {{"degrid_task_s", 2.0},
          {"assembly_s", 0.1},
          {"pieces_s", 0.2},
          {"tower_s", 0.7},
          {"column_s", 0.3},
          {"contribution_s", 0.6},
          {"facet_s", 0.18}}}}},
      {"transit", {{"write_bytes_per_s", 5e8}}},
      {"device", {{"kind", "cpu"}}},
      {"environment", {{"hosts", {"node1"}}}},
  };
}

TEST(PredictionCalibration, TakesEachRatePerThread) {
  const auto c = calibration_from(calibration_report(), "r.json");
  EXPECT_EQ(c.host, "node1");
  // Less the waits on the writers' queue.
  EXPECT_DOUBLE_EQ(c.rates.degrid_s_per_vis, 1.5 / 1000);
  EXPECT_DOUBLE_EQ(c.rates.part_s, 1.0 / 20);
  EXPECT_DOUBLE_EQ(c.rates.contribution_s, 0.9 / 90);
  EXPECT_DOUBLE_EQ(c.rates.facet_s, 0.18 / 18);
  EXPECT_DOUBLE_EQ(c.rates.writer_bytes_per_s, 5e8);
}

TEST(PredictionCalibration, RefusesWhatCannotCalibrate) {
  const auto refused = [](nlohmann::json r) {
    try {
      calibration_from(r, "r.json");
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), "--calibration");
      return true;
    }
    return false;
  };
  EXPECT_FALSE(refused(calibration_report()));
  auto plan = calibration_report();
  plan["mode"] = "plan";
  EXPECT_TRUE(refused(plan));
  auto synthetic = calibration_report();
  synthetic["pipeline"]["synthetic_vis"] = true;
  EXPECT_TRUE(refused(synthetic));
  auto hosts = calibration_report();
  hosts["environment"]["hosts"] = {"node1", "node2"};
  EXPECT_TRUE(refused(hosts));
  auto nothing = calibration_report();
  nothing["timing"]["stages"]["degrid_task_s"] = 0.0;
  EXPECT_TRUE(refused(nothing));
  auto held = calibration_report();  // all waits
  held["pipeline"]["per_rank"][1]["queue_wait_s"] = 2.0;
  EXPECT_TRUE(refused(held));
  auto no_work = calibration_report();
  for (auto& rank : no_work["pipeline"]["per_rank"]) rank["visibilities"] = 0;
  EXPECT_TRUE(refused(no_work));
  auto image = calibration_report();
  image["config"]["direction"] = "image";
  EXPECT_TRUE(refused(image));
}

TEST(PredictionTimeLimit, IsTheShortestWholeMinuteGivingTheMargin) {
  for (const double stream_s : {1.0, 100.0, 1000.0, 30000.0}) {
    for (const int runs : {1, 3}) {
      const auto limit = job::time_limit_for(stream_s, runs, 1.5);
      EXPECT_GE(job::stream_budget(limit, runs).duration_s, 1.5 * stream_s) << limit;
      // A minute less gives less (or nothing: too short to stream).
      const int minutes = static_cast<int>(job::time_limit_seconds(limit) / 60);
      if (minutes > 1) {
        double shorter = 0;
        try {
          shorter = job::stream_budget(std::to_string(minutes - 1), runs).duration_s;
        } catch (const UsageError&) {
        }
        EXPECT_LT(shorter, 1.5 * stream_s) << limit;
      }
    }
  }
  // 1500 s to stream: 34 minutes less 10 % setup, 10 % drain, 5 % margin.
  EXPECT_EQ(job::time_limit_for(1000, 1, 1.5), "00:34:00");
  EXPECT_EQ(job::time_limit_for(200000, 1, 1.5), "3-11:45:00");
}

}  // namespace
}  // namespace iotest::prediction
