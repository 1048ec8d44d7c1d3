// `iotest plan`: its own options (the allocation, the job script), then
// every option of `iotest run`, whose run it lays out.
#include <memory>
#include <string>

#include "commands.hpp"
#include "iotest/commands/plan.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/job/job.hpp"
#include "iotest/pipeline/run.hpp"
#include "iotest/swiftly/direction.hpp"
#include "run_options.hpp"

namespace iotest::cli {

namespace {

// The plan's options as parsed.
struct PlanCommand {
  iotest::commands::PlanOptions options;
  bool slurm = false;                        // --slurm
  iotest::job::JobScriptOptions job_script;  // --slurm's options
  RunCommand run;                            // the run laid out
};

// The nodes the run is laid out on.
void add_allocation_options(CLI::App* plan, iotest::commands::PlanOptions& plan_opts) {
  plan->add_option("--nodes", plan_opts.nodes, "nodes the job will use")
      ->capture_default_str()
      ->group("Allocation");
  plan->add_option("--ranks-per-node", plan_opts.ranks_per_node,
                   "MPI ranks on each node; the run deals its roles over the nodes, rank r on node "
                   "r mod nodes "
                   "(default: enough for one streamer per node; --device=cuda: one per GPU)")
      ->group("Allocation");
  plan->add_option("--node-memory", plan_opts.node_memory,
                   "memory of one node: bytes, or with a binary suffix K M G T (24G = 24 GiB; "
                   "default: what this machine has available, as run checks)")
      ->transform(CLI::AsSizeValue(false))
      ->group("Allocation");
  plan->add_option("--cores-per-node", plan_opts.cores_per_node,
                   "cores of a node, which its ranks' threads share (default: this machine's)")
      ->group("Allocation");
  plan->add_option("--gpus-per-node", plan_opts.gpus_per_node,
                   "--device=cuda: GPUs of a node, which its streamers share round-robin "
                   "(default: this machine's, else 1; and one streamer per GPU)")
      ->group("Allocation");
  plan->add_option("--gpu-memory", plan_opts.gpu_memory,
                   "--device=cuda: memory of one GPU: bytes, or with a binary suffix K M G T "
                   "(80G = 80 GiB; default: this machine's first GPU's)")
      ->transform(CLI::AsSizeValue(false))
      ->group("Allocation");
}

// --slurm, and what its job script needs beyond the run's options.
void add_job_script_options(CLI::App* plan, PlanCommand& s) {
  plan->add_flag("--slurm", s.slurm,
                 "print the Slurm job script for this layout on stdout (the plan's summary goes "
                 "to stderr): #SBATCH lines, threads, binding, the srun or mpirun line running "
                 "`iotest run` with every run option given here")
      ->group("Slurm");
  plan->add_option(
          "--launcher", s.job_script.launcher,
          "srun, or mpirun (this build's MPI's own launcher: Open MPI's mpirun, MPICH's mpiexec)")
      ->capture_default_str()
      ->group("Slurm");
  plan->add_option("--time-limit", s.job_script.time_limit, "the job's time limit")
      ->capture_default_str()
      ->group("Slurm");
  plan->add_option("--partition", s.job_script.partition, "the Slurm partition")->group("Slurm");
  plan->add_option("--account", s.job_script.account, "the account charged")->group("Slurm");
  plan->add_option("--binary", s.job_script.iotest, "iotest as the compute nodes find it")
      ->capture_default_str()
      ->group("Slurm");
}

// What the plan lays out: the run's rec-set, observation, shape, output
// and device, as `iotest run` would take them.
void plan_the_run(const iotest::pipeline::RunOptions& r, iotest::commands::PlanOptions& p) {
  p.rec_set = r.rec_set;
  p.observation = r.observation;
  p.facet_workers = r.facet_workers;
  p.assigner = r.assigner;
  p.threads = r.threads;
  p.producer_threads = r.producer_threads;
  p.send_queue = r.send_queue;
  p.subgrid_queue = r.subgrid_queue;
  p.task_queue = r.task_queue;
  p.bls_per_task = r.bls_per_task;
  p.visibility_queue = r.visibility_queue;
  p.writer_count = r.writer_count;
  p.writer_ranks = r.writer_ranks;
  p.transit_queue = r.transit_queue;
  p.fork_writer = r.fork_writer;
  p.synthetic_vis = r.synthetic_vis;
  p.synthetic_sequential = r.synthetic_sequential;
  p.synthetic_order = r.synthetic_order;
  p.output = r.output;
  p.device = r.device;
  p.direction = r.direction;
  p.inputs = r.inputs;
  p.input_storage = r.storage;
  p.image_autocorrelations = r.image_autocorrelations;
  p.image = r.image;
  p.network_only = r.network_only;
  p.prediction = r.prediction;
}

// The plan of the run given by `s.run`, and with --slurm its job script,
// whose run line carries the options given to `plan` that `run` takes.
int run_plan(PlanCommand& s, const CLI::App& plan, const CLI::App& run, const ReportOptions& out) {
  auto& plan_opts = s.options;
  auto& plan_run = s.run;
  auto& slurm_opts = s.job_script;
  check_run_command(plan_run);
  plan_the_run(plan_run.options, plan_opts);
  // The run's own checks (but for its ranks, which the plan lays out):
  // a script is never written for a run that would refuse its options.
  plan_opts.storage = iotest::pipeline::check_run_combination(plan_run.options);
  if (s.slurm) {
    const auto& r = plan_run.options;
    slurm_opts.run_arguments = shared_arguments(plan, run);
    slurm_opts.paths = plan_run.paths;
    slurm_opts.repetitions = plan_run.repetitions;
    // The run refuses --duration where it has no walk to stonewall.
    slurm_opts.stonewall = r.direction == iotest::swiftly::Direction::predict && !r.network_only &&
                           !r.synthetic_sequential;
    plan_opts.slurm = slurm_opts;
    // --calibration without --time-limit: the limit from the prediction.
    if (!r.prediction.calibration.empty() && plan.count("--time-limit") == 0)
      plan_opts.slurm->time_limit.clear();
  }
  emit(iotest::commands::plan(plan_opts), out);
  return iotest::kExitOk;
}

}  // namespace

Command add_plan_command(CLI::App& app, ReportOptions& out) {
  const auto state = std::make_shared<PlanCommand>();
  PlanCommand& s = *state;
  auto* plan = app.add_subcommand(
      "plan",
      "resolved parameters, counts and memory per role of a set, and its ranks laid out on "
      "--nodes against the memory of a node; --slurm: the job script");
  // The plan's own options first: the allocation and the job script.
  add_allocation_options(plan, s.options);
  add_job_script_options(plan, s);
  // Then every option of `iotest run`, registered and checked as run's
  // (run_options.hpp): the plan lays out the run they describe, and --slurm
  // carries each one given into the job script's run line.
  add_run_options(plan, s.run,
                  "the run's paths, as `iotest run` takes them: predict: OUT%d.h5 it would "
                  "write (counts the writers' HDF5 caches); image: the files it would read, "
                  "the first one's observation taken from its provenance unless --vis-set is "
                  "given. plan writes nothing");
  plan->get_option("--facet-workers")
      ->description(
          "producer ranks, each holding facets (default: one per facet; 0: streamers degrid "
          "zeros; always 0 with --synthetic-vis)");
  add_window_width_option(plan, s.options.window_width);
  plan->add_option("--rates-from", s.options.rates_from,
                   "a run's JSON report: suggest --writer-ranks from its measured compute and "
                   "write rates")
      ->group(kWriters);
  add_report_options(plan, out);
  set_example(plan,
              "  iotest plan --rec-set=small --vis-set=vlaa --nodes=4 --node-memory=256G\n"
              "  iotest plan --rec-set=small --vis-set=vlaa --nodes=16 --slurm "
              "'/local/%h/vis%d.h5' > job.sh");
  // `run` is added after `plan` (--help's order): found when the plan runs.
  const auto execute = [state, plan, &app, &out] {
    return run_in_process(out,
                          [&] { return run_plan(*state, *plan, *app.get_subcommand("run"), out); });
  };
  return {plan, execute, {}};
}

}  // namespace iotest::cli
