// The report model serialises to the documented JSON keys and renders text.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

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


}  // namespace
}  // namespace iotest::report
