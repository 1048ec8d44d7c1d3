// The assigner: hands out parts in walk order to the streamers with the
// most free subgrid slots (they asked for work by counting their free
// slots), and tells every producer where each part went.
#include <algorithm>
#include <list>

#include "iotest/common/system.hpp"
#include "iotest/pipeline/roles.hpp"

namespace iotest::pipeline {
namespace {

// The assigner's run: the streamers' credit (free slots they reported),
// the walk's cursor, and the messages in flight. One turn takes a request,
// ends the walk if past the deadline, grants what credit allows and tells
// the producers; the run turns until every streamer has said goodbye.
struct Assigner {
  Context& ctx;
  RankResult out;
  report::RankStats& st = out.stats;
  const int streamers = ctx.roles.streamers;
  const index_t parts = static_cast<index_t>(ctx.plan.parts.size());
  std::vector<index_t> credit = std::vector<index_t>(static_cast<size_t>(streamers), 0);
  std::vector<bool> told_done = std::vector<bool>(static_cast<size_t>(streamers), false);
  int goodbyes = 0;
  index_t next = 0;  // the next part to grant, in walk order
  // --duration: past the deadline the walk ends at the next visit border.
  index_t end = parts;
  bool ended = false;
  // Messages in flight keep their buffers alive here.
  std::list<std::pair<std::vector<std::int64_t>, MPI_Request>> sends;
  Backoff backoff;
  double idle = 0;

  // What one turn hands out: each streamer's parts, and the (part,
  // streamer) pairs every producer is told ((-1, visit): the walk's end).
  struct Handout {
    std::vector<std::vector<std::int64_t>> grants;
    std::vector<std::int64_t> assigned;
  };

  explicit Assigner(Context& c) : ctx(c) {}
  RankResult run();
  bool turn();
  bool take_request();
  void end_walk(Handout& h);
  void grant(Handout& h);
  bool send_handout(Handout& h);
  void say_walk_over();
  void send(std::vector<std::int64_t> data, int rank, int tag);
  void reap_sends();
};

RankResult Assigner::run() {
  const auto t_start = Clock::now();
  while (goodbyes < streamers)
    if (turn())
      backoff.reset();
    else
      backoff.pause(idle);
  // The last messages, until each has gone.
  while (!sends.empty()) {
    reap_sends();
    if (!sends.empty()) backoff.pause(idle);
  }
  st.idle_s = idle;
  st.busy_s = seconds_since(t_start) - idle;
  return out;
}

// True if anything moved: a request came or producers were told of parts.
bool Assigner::turn() {
  bool progressed = take_request();
  Handout h;
  h.grants.resize(static_cast<size_t>(streamers));
  if (!ended && ctx.past_deadline()) end_walk(h);
  grant(h);
  progressed = send_handout(h) || progressed;
  if (next == end) say_walk_over();
  reap_sends();
  return progressed;
}

// A streamer's request: n more parts (its freed slots), or goodbye (n < 0).
bool Assigner::take_request() {
  int flag = 0;
  MPI_Status status;
  MPI_Iprobe(MPI_ANY_SOURCE, kTagRequest, ctx.control, &flag, &status);
  if (!flag) return false;
  std::int64_t n = 0;
  MPI_Recv(&n, 1, MPI_INT64_T, status.MPI_SOURCE, kTagRequest, ctx.control, MPI_STATUS_IGNORE);
  ++st.messages_received;
  const int s = status.MPI_SOURCE - ctx.roles.producers;
  if (n < 0) {  // goodbye: it has seen that no more work comes
    ++goodbyes;
  } else {
    credit[static_cast<size_t>(s)] += n;
  }
  return true;
}

// --duration, once past the deadline: the walk ends after the visit under
// way (its parts are all granted); the producers are told where.
void Assigner::end_walk(Handout& h) {
  ended = true;
  end = next;
  while (end < parts && ctx.plan.parts[static_cast<size_t>(end)].part > 0) ++end;
  const index_t visits = static_cast<index_t>(ctx.plan.visits.size());
  const index_t end_visit = end < parts ? ctx.plan.parts[static_cast<size_t>(end)].visit : visits;
  out.walk_end = end_visit < visits ? end_visit : -1;
  h.assigned.insert(h.assigned.end(), {-1, static_cast<std::int64_t>(end_visit)});
}

// Grant parts one by one to the streamer with the most free slots.
void Assigner::grant(Handout& h) {
  while (next < end) {
    const auto most = std::max_element(credit.begin(), credit.end());
    if (*most <= 0) break;
    const auto s = static_cast<size_t>(most - credit.begin());
    --*most;
    h.grants[s].push_back(next);
    h.assigned.insert(h.assigned.end(), {next, static_cast<std::int64_t>(s)});
    ++next;
  }
}

// Each streamer its grant, then every producer the same pairs. True if
// the producers were told anything.
bool Assigner::send_handout(Handout& h) {
  for (int s = 0; s < streamers; ++s)
    if (!h.grants[static_cast<size_t>(s)].empty())
      send(std::move(h.grants[static_cast<size_t>(s)]), ctx.roles.streamer_rank(s), kTagGrant);
  if (h.assigned.empty()) return false;
  for (int p = 0; p < ctx.roles.producers; ++p) send(h.assigned, p, kTagAssign);
  return true;
}

// No more work: an empty grant says so, once to each streamer.
void Assigner::say_walk_over() {
  for (int s = 0; s < streamers; ++s)
    if (!told_done[static_cast<size_t>(s)]) {
      send({}, ctx.roles.streamer_rank(s), kTagGrant);
      told_done[static_cast<size_t>(s)] = true;
    }
}

void Assigner::send(std::vector<std::int64_t> data, int rank, int tag) {
  sends.emplace_back(std::move(data), MPI_REQUEST_NULL);
  auto& [buffer, request] = sends.back();
  MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_INT64_T, rank, tag, ctx.control,
            &request);
  ++st.messages_sent;
  st.bytes_sent += static_cast<index_t>(buffer.size() * sizeof(std::int64_t));
}

// Sends that have completed: their buffers dropped.
void Assigner::reap_sends() {
  sends.remove_if([](auto& m) {
    int done = 0;
    MPI_Test(&m.second, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

}  // namespace

RankResult run_assigner(Context& ctx) { return Assigner(ctx).run(); }

}  // namespace iotest::pipeline
