// The GPU side of the memory model (--device=cuda): what a streamer holds
// on its GPU, how a node's streamers share its GPUs, and the decision that
// refuses a job a GPU cannot hold (run, degrid, grid; plan lays out).
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "iotest/commands/plan.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/device/device.hpp"
#include "iotest/job/job.hpp"
#include "iotest/job/memory.hpp"
#include "iotest/report/report.hpp"

namespace iotest::job {
namespace {

constexpr index_t kGiB = index_t{1} << 30;

device::GpuInfo fake_gpu(int index, index_t memory_bytes) {
  device::GpuInfo g;
  g.index = index;
  g.name = "Fake GPU " + std::to_string(index);
  g.driver = "CUDA driver 12.4, runtime 12.6";
  g.memory_bytes = memory_bytes;
  return g;
}

// The UsageError's one line, or "" when the call passes.
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.one_line();
  }
  return {};
}

TEST(GpuMemory, StreamersShareANodesGpusRoundRobin) {
  EXPECT_EQ(streamers_per_gpu(1, 1), 1);
  EXPECT_EQ(streamers_per_gpu(4, 4), 1);
  EXPECT_EQ(streamers_per_gpu(5, 4), 2);
  EXPECT_EQ(streamers_per_gpu(8, 4), 2);
  EXPECT_EQ(streamers_per_gpu(9, 4), 3);
  EXPECT_EQ(streamers_per_gpu(0, 4), 0);
  EXPECT_EQ(streamers_per_gpu(3, 0), 0);  // the CPU: no GPU
}

TEST(GpuMemory, AJobEveryGpuHoldsPasses) {
  // 4 streamers on 2 GPUs of 10 GiB: 2 each x 5 GiB = 10 GiB, just fits.
  const std::vector<device::GpuInfo> gpus = {fake_gpu(0, 10 * kGiB), fake_gpu(1, 10 * kGiB)};
  EXPECT_EQ(refusal([&] { require_gpu_memory(5 * kGiB, 4, gpus); }), "");
  // No GPU (the CPU) or no streamer on the node: nothing to check.
  EXPECT_EQ(refusal([&] { require_gpu_memory(100 * kGiB, 4, {}); }), "");
  EXPECT_EQ(refusal([&] { require_gpu_memory(100 * kGiB, 0, gpus); }), "");
}

TEST(GpuMemory, AGpuTooSmallIsRefusedNamingItTheEstimateAndItsMemory) {
  // 5 streamers on 2 GPUs: GPU 0 holds 3 (0, 2, 4), GPU 1 two.
  const std::vector<device::GpuInfo> gpus = {fake_gpu(0, 10 * kGiB), fake_gpu(1, 10 * kGiB)};
  const std::string line = refusal([&] { require_gpu_memory(4 * kGiB, 5, gpus); });
  EXPECT_EQ(line.rfind("--device: cuda: GPU 0 (Fake GPU 0)", 0), 0u) << line;
  EXPECT_NE(line.find("3 streamer(s) x 4.00 GiB = 12.00 GiB"), std::string::npos) << line;
  EXPECT_NE(line.find("more than its 10.00 GiB"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);

  // Unlike GPUs: the second, smaller one is the one that cannot hold its share.
  const std::vector<device::GpuInfo> mixed = {fake_gpu(0, 80 * kGiB), fake_gpu(1, 6 * kGiB)};
  const std::string second = refusal([&] { require_gpu_memory(4 * kGiB, 4, mixed); });
  EXPECT_EQ(second.rfind("--device: cuda: GPU 1 (Fake GPU 1) holds 2 streamer(s)", 0), 0u)
      << second;
  EXPECT_EQ(refusal([&] { require_gpu_memory(4 * kGiB, 3, mixed); }), "");  // GPU 1 holds one
}

TEST(GpuMemory, DeviceOptionIsCpuOrCuda) {
  EXPECT_EQ(parse_device("cpu"), device::Kind::cpu);
  EXPECT_EQ(parse_device("cuda"), device::Kind::cuda);
  EXPECT_EQ(refusal([] { parse_device("gpu"); }), "--device: expected cpu or cuda, got 'gpu'");
  EXPECT_TRUE(require_device(device::Kind::cpu).empty());
}

TEST(GpuMemory, CudaWithoutAGpuSaysWhatIsMissing) {
  const auto probe = device::probe();
  if (device::built_with_cuda() && !probe.gpus.empty()) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(refusal([] { require_device(device::Kind::cuda); }),
            "--device: cuda: " + probe.missing);
}

Job small_job() {
  JobOptions o;
  o.rec_set = "2k-1k-256";
  o.observation =
      telescope::ObservationOptions{"vlaa", "-1800:1800/12/6", "260e6:300e6/24/12", -40.0};
  return resolve(o);
}

TEST(GpuMemory, TheModelCountsAStreamersGpuApartFromItsHost) {
  const auto job = small_job();
  const binning::Binner binner(job.p, *job.obs, *job.geometry, job.split());
  const auto counts = binner.count_visits(0, job.obs->baseline_count(), 1);
  RunShape cpu;
  cpu.streamers = 2;
  RunShape cuda = cpu;
  cuda.device = device::Kind::cuda;
  const auto on_cpu = estimate_memory(job, cpu, &counts);
  const auto on_gpu = estimate_memory(job, cuda, &counts);
  EXPECT_EQ(on_cpu.streamer_gpu_bytes, 0);
  // The host's figures are the same; the GPU's come as items of their own.
  EXPECT_EQ(on_gpu.streamer_bytes, on_cpu.streamer_bytes);
  EXPECT_EQ(on_gpu.producer_bytes, on_cpu.producer_bytes);
  index_t gpu_items = 0;
  for (const auto& i : on_gpu.items)
    if (i.role == "streamer GPU") gpu_items += i.bytes;
  EXPECT_GT(on_gpu.streamer_gpu_bytes, 0);
  EXPECT_EQ(gpu_items, on_gpu.streamer_gpu_bytes);

  // The shape: the set's sizes, the largest tower, a batch of the default
  // subgrids holding at most a task each, and the observation's tables.
  const auto shape = gpu_shape(job, counts, cuda.bls_per_task);
  EXPECT_EQ(shape.xM, job.p.xM);
  EXPECT_EQ(shape.xA, job.p.xA);
  EXPECT_EQ(shape.tower_planes, max_tower_planes(job, counts));
  EXPECT_EQ(shape.batch_subgrids, device::kDefaultBatchSubgrids);
  EXPECT_GT(shape.batch_visibilities, 0);
  EXPECT_LE(shape.batch_visibilities,
            device::kDefaultBatchSubgrids * task_visibilities(job, counts, cuda.bls_per_task));
  EXPECT_LE(shape.batch_visibilities,
            std::accumulate(counts.visibilities.begin(), counts.visibilities.end(), index_t{0}));
  const auto& obs = *job.obs;
  EXPECT_EQ(shape.table_bytes, obs.time.steps * obs.antenna_count() * 24 + obs.freq.steps * 8 +
                                   kKernelCoefficientBytes);
  EXPECT_EQ(on_gpu.streamer_gpu_bytes, device::gpu_memory_bytes(shape));
}

commands::PlanOptions gpu_plan() {
  commands::PlanOptions o;
  o.rec_set = "small";
  o.observation = telescope::ObservationOptions{"vlaa", {}, {}, {}};
  o.node_memory = 1024 * kGiB;
  o.device = device::Kind::cuda;
  o.gpus_per_node = 4;
  o.gpu_memory = 80 * kGiB;
  o.threads = 1;
  return o;
}

TEST(GpuMemory, PlanLaysOutOneStreamerPerGpu) {
  auto o = gpu_plan();
  o.nodes = 2;
  const auto r = commands::plan(o);
  ASSERT_TRUE(r.advice && r.device);
  EXPECT_EQ(r.device->kind, "cuda");
  const auto& a = *r.advice;
  // 9 producers dealt over 2 nodes (5 and 4): 8 ranks a node leave 3 and 4
  // streamers, none more than the node's 4 GPUs (9 a node would put 5 on
  // node 1).
  EXPECT_EQ(a.ranks_per_node, 8);
  EXPECT_EQ(a.streamers, 7);
  EXPECT_EQ(a.gpus_per_node, 4);
  EXPECT_EQ(a.gpu_memory_bytes, 80 * kGiB);
  ASSERT_EQ(a.layout.size(), 2u);
  EXPECT_EQ(a.layout[0].streamers, 3);
  EXPECT_EQ(a.layout[1].streamers, 4);
  for (const auto& g : a.layout) {
    EXPECT_EQ(g.streamers_per_gpu, 1);
    EXPECT_EQ(g.gpu_bytes, r.memory.streamer_gpu_bytes);
  }
  const auto j = report::to_json(r);
  EXPECT_EQ(j["advice"]["gpus_per_node"], 4);
  EXPECT_EQ(j["advice"]["layout"][0]["gpu_bytes"], r.memory.streamer_gpu_bytes);
  EXPECT_EQ(j["device"]["kind"], "cuda");
}

TEST(GpuMemory, PlanRefusesAGpuThatCannotHoldItsStreamers) {
  auto o = gpu_plan();
  const auto fits = commands::plan(o);
  const index_t one = fits.memory.streamer_gpu_bytes;
  ASSERT_GT(one, 0);
  // 9 producers + 9 streamers on one node of 4 GPUs: 3 on the busiest.
  o.ranks_per_node = 18;
  o.gpu_memory = 3 * one - 1;
  const std::string line = refusal([&] { commands::plan(o); });
  EXPECT_EQ(line.rfind("--gpu-memory: node 0: 9 streamer(s) on 4 GPU(s), 3 on the busiest", 0), 0u)
      << line;
  o.gpu_memory = 3 * one;
  EXPECT_EQ(refusal([&] { commands::plan(o); }), "");
  // --gpus-per-node and --gpu-memory belong to --device=cuda.
  o.device = device::Kind::cpu;
  EXPECT_EQ(refusal([&] { commands::plan(o); }).rfind("--gpus-per-node: applies to", 0), 0u);
}

TEST(GpuMemory, ReportSaysTheDeviceAndWhatHoldsBackTheGpus) {
  report::Report r;
  r.mode = "run";
  r.device = device_section(device::Kind::cpu, {fake_gpu(0, kGiB)});
  auto j = report::to_json(r);
  EXPECT_EQ(j["device"], nlohmann::json({{"kind", "cpu"}}));  // no GPU fields on the CPU

  r.device = device_section(device::Kind::cuda, {fake_gpu(0, 80 * kGiB)});
  j = report::to_json(r);
  EXPECT_EQ(j["device"]["kind"], "cuda");
  ASSERT_EQ(j["device"]["gpus"].size(), 1u);
  EXPECT_EQ(j["device"]["gpus"][0]["name"], "Fake GPU 0");
  EXPECT_EQ(j["device"]["gpus"][0]["memory_bytes"], 80 * kGiB);
  EXPECT_TRUE(j["device"]["kernel_s"].is_null());  // filled by the GPU path
  EXPECT_TRUE(j["device"]["transfer_s"].is_null());
  EXPECT_TRUE(j["device"]["host_wait_s"].is_null());
  r.device->kernel_s = 1.5;
  EXPECT_EQ(report::to_json(r)["device"]["kernel_s"], 1.5);

  r.transit = report::Transit{};
  r.transit->bound = "writers";
  const auto text = report::render_text(r);
  EXPECT_NE(text.find("device: cuda, GPU 0 Fake GPU 0 (80.0 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("bound by the writers: storage holds back the GPU streamers"),
            std::string::npos)
      << text;
  r.device = device_section(device::Kind::cpu, {});
  EXPECT_EQ(report::render_text(r).find("GPU"), std::string::npos);
}

}  // namespace
}  // namespace iotest::job
