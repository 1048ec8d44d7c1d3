// The assigner: hands out parts in walk order to the streamers with the
// most free subgrid slots (they asked for work by counting their free
// slots), and tells every producer where each part went.
#include <algorithm>
#include <list>

#include "iotest/common/system.hpp"
#include "iotest/pipeline/roles.hpp"

namespace iotest::pipeline {

RankResult run_assigner(Context& ctx) {
  RankResult out;
  auto& st = out.stats;
  const int streamers = ctx.roles.streamers;
  const auto parts = static_cast<index_t>(ctx.plan.parts.size());
  std::vector<index_t> credit(static_cast<size_t>(streamers), 0);  // free slots reported
  std::vector<bool> told_done(static_cast<size_t>(streamers), false), gone(told_done);
  int goodbyes = 0;
  index_t next = 0;
  // --duration: past the deadline the walk ends at the next visit border.
  index_t end = parts;
  bool ended = false;
  // Messages in flight keep their buffers alive here.
  std::list<std::pair<std::vector<std::int64_t>, MPI_Request>> sends;
  const auto send = [&](std::vector<std::int64_t> data, int rank, int tag) {
    sends.emplace_back(std::move(data), MPI_REQUEST_NULL);
    auto& [buffer, request] = sends.back();
    MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_INT64_T, rank, tag, ctx.control,
              &request);
    ++st.messages_sent;
    st.bytes_sent += static_cast<index_t>(buffer.size() * sizeof(std::int64_t));
  };
  Backoff backoff;
  double idle = 0;
  const auto t_start = Clock::now();
  while (goodbyes < streamers) {
    bool progressed = false;
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kTagRequest, ctx.control, &flag, &status);
    if (flag) {
      std::int64_t n = 0;
      MPI_Recv(&n, 1, MPI_INT64_T, status.MPI_SOURCE, kTagRequest, ctx.control, MPI_STATUS_IGNORE);
      ++st.messages_received;
      const int s = status.MPI_SOURCE - ctx.roles.producers;
      if (n < 0) {  // goodbye: it has seen that no more work comes
        gone[static_cast<size_t>(s)] = true;
        ++goodbyes;
      } else {
        credit[static_cast<size_t>(s)] += n;
      }
      progressed = true;
    }
    // Grant parts one by one to the streamer with the most free slots.
    std::vector<std::vector<std::int64_t>> grants(static_cast<size_t>(streamers));
    std::vector<std::int64_t> assigned;  // (part, streamer) pairs for the producers
    if (!ended && ctx.past_deadline()) {
      ended = true;
      end = next;  // the parts of a visit under way are all granted
      while (end < parts && ctx.plan.parts[static_cast<size_t>(end)].part > 0) ++end;
      const index_t visits = static_cast<index_t>(ctx.plan.visits.size());
      const index_t end_visit =
          end < parts ? ctx.plan.parts[static_cast<size_t>(end)].visit : visits;
      out.walk_end = end_visit < visits ? end_visit : -1;
      assigned.insert(assigned.end(), {-1, static_cast<std::int64_t>(end_visit)});
    }
    while (next < end) {
      const auto most = std::max_element(credit.begin(), credit.end());
      if (*most <= 0) break;
      const auto s = static_cast<size_t>(most - credit.begin());
      --*most;
      grants[s].push_back(next);
      assigned.insert(assigned.end(), {next, static_cast<std::int64_t>(s)});
      ++next;
    }
    for (int s = 0; s < streamers; ++s)
      if (!grants[static_cast<size_t>(s)].empty())
        send(std::move(grants[static_cast<size_t>(s)]), ctx.roles.streamer_rank(s), kTagGrant);
    if (!assigned.empty()) {
      for (int p = 0; p < ctx.roles.producers; ++p) send(assigned, p, kTagAssign);
      progressed = true;
    }
    if (next == end)  // no more work: an empty grant says so, once
      for (int s = 0; s < streamers; ++s)
        if (!told_done[static_cast<size_t>(s)]) {
          send({}, ctx.roles.streamer_rank(s), kTagGrant);
          told_done[static_cast<size_t>(s)] = true;
        }
    sends.remove_if([](auto& m) {
      int done = 0;
      MPI_Test(&m.second, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
    if (progressed)
      backoff.reset();
    else
      backoff.pause(idle);
  }
  while (!sends.empty()) {
    sends.remove_if([](auto& m) {
      int done = 0;
      MPI_Test(&m.second, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
    if (!sends.empty()) backoff.pause(idle);
  }
  st.idle_s = idle;
  st.busy_s = seconds_since(t_start) - idle;
  return out;
}

}  // namespace iotest::pipeline
