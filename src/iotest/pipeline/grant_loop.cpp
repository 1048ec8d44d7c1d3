#include "iotest/pipeline/grant_loop.hpp"

#include "iotest/common/openmp.hpp"
#include "iotest/common/parallel.hpp"

namespace iotest::pipeline {

Grants::Grants(const Context& ctx, report::RankStats& stats)
    : ctx_(ctx), stats_(stats), more_coming_(ctx.roles.assigner_rank >= 0) {
  if (more_coming_) return;
  const int me = ctx.roles.streamer_index();
  for (size_t i = 0; i < ctx.plan.parts.size(); ++i)
    if (ctx.plan.parts[i].streamer == me) todo_.push_back(static_cast<index_t>(i));
}

void Grants::request(std::int64_t n) {
  if (!more_coming_ || n == 0) return;
  MPI_Send(&n, 1, MPI_INT64_T, ctx_.roles.assigner_rank, kTagRequest, ctx_.control);
  ++stats_.messages_sent;
}

bool Grants::poll() {
  if (!more_coming_) return false;
  int flag = 0;
  MPI_Status status;
  MPI_Iprobe(ctx_.roles.assigner_rank, kTagGrant, ctx_.control, &flag, &status);
  if (!flag) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_INT64_T, &count);
  std::vector<std::int64_t> granted(static_cast<size_t>(count));
  MPI_Recv(granted.data(), count, MPI_INT64_T, status.MPI_SOURCE, kTagGrant, ctx_.control,
           MPI_STATUS_IGNORE);
  ++stats_.messages_received;
  if (granted.empty()) {  // the walk is over: the assigner waits for our goodbye
    request(-1);
    more_coming_ = false;
  }
  for (const auto part : granted) todo_.push_back(part);
  return true;
}

Contributions::Contributions(const Context& ctx, report::RankStats& stats)
    : ctx_(ctx), stats_(stats), facets_(ctx.job.p.facet_count()), values_(ctx.job.p.m * ctx.job.p.m) {}

void Contributions::post_receives(PartBuffers& b) const {
  b.requests.resize(static_cast<size_t>(facets_));
  for (index_t f = 0; f < facets_; ++f)
    MPI_Irecv(b.contributions.data() + f * values_, static_cast<int>(values_), MPI_C_DOUBLE_COMPLEX,
              ctx_.roles.facet_owner(f), static_cast<int>(f), ctx_.data,
              &b.requests[static_cast<size_t>(f)]);
}

bool Contributions::received(PartBuffers& b) const {
  int done = 0;
  MPI_Testall(static_cast<int>(facets_), b.requests.data(), &done, MPI_STATUSES_IGNORE);
  if (!done) return false;
  stats_.messages_received += facets_;
  stats_.bytes_received += facets_ * values_ * static_cast<index_t>(sizeof(cplx));
  return true;
}

void Contributions::post_sends(PartBuffers& b) const {
  b.requests.resize(static_cast<size_t>(facets_));
  for (index_t f = 0; f < facets_; ++f)
    MPI_Isend(b.contributions.data() + f * values_, static_cast<int>(values_), MPI_C_DOUBLE_COMPLEX,
              ctx_.roles.facet_owner(f), static_cast<int>(f), ctx_.data,
              &b.requests[static_cast<size_t>(f)]);
  stats_.messages_sent += facets_;
  stats_.bytes_sent += facets_ * values_ * static_cast<index_t>(sizeof(cplx));
}

bool Contributions::sent(PartBuffers& b) const {
  int done = 0;
  MPI_Testall(static_cast<int>(facets_), b.requests.data(), &done, MPI_STATUSES_IGNORE);
  return done != 0;
}

void run_loop(TaskQueue& tasks, int threads, double& wait_s, double& idle_s,
              const std::function<LoopTurn()>& turn) {
  ExceptionCollector failures;
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    if (thread != 0) {
      tasks.serve(thread);
    } else {
      failures.capture([&] {
        Backoff backoff;
        while (!tasks.failed) {
          const LoopTurn t = turn();
          if (t.finished) break;
          if (t.progressed)
            backoff.reset();
          else if (!tasks.try_run(thread))
            backoff.pause(t.waiting ? wait_s : idle_s);
        }
      });
      tasks.close();
    }
  }
  failures.rethrow();
  tasks.failures.rethrow();
}

}  // namespace iotest::pipeline
