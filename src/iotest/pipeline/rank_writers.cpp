// A rank's writers: the outputs it holds and how the chunks reach them.
// In situ a streamer hands its chunks to its own writers. In transit it
// forwards them to the writer ranks (transit.hpp), which write them. In
// situ with outputs split by frequency (ms, issue 46) the streamers
// exchange them over the same protocol, each writing its own files.
#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "iotest/common/system.hpp"
#include "iotest/pipeline/roles.hpp"
#include "iotest/pipeline/transit.hpp"

namespace iotest::pipeline {
namespace {

// --writer-count writers a rank, files numbered across the run; the
// layout each writes comes with the split (by frequency: its file's).
WriterOptions own_writers(const Context& ctx) {
  const auto& o = ctx.options;
  WriterOptions wo;
  wo.storage = ctx.storage;
  wo.fork = o.fork_writer;
  wo.queue_slots = std::max<index_t>(1, *o.visibility_queue / o.writer_count);
  wo.partial_slots = wo.queue_slots;  // as many parts held as chunks queued
  wo.paths = ctx.outputs();
  wo.partials = ctx.partial_outputs();
  wo.shared = ctx.shared_output;
  wo.split = ctx.split();
  wo.first_file = ctx.first_output();
  wo.stored_form = ctx.storage.stored_form;
  return wo;
}

// A streamer whose chunks go to other ranks: one queue of
// --visibility-queue chunks, emptied into `ranks` (parts of chunks are
// joined where they arrive); those for this rank, in the exchange, into
// `own`.
WriterOptions forwarding_writers(Context& ctx, std::vector<int> ranks, Writers* own) {
  const auto& o = ctx.options;
  WriterOptions wo;
  wo.storage = ctx.storage;
  wo.queue_slots = *o.visibility_queue;
  wo.paths = {std::string()};
  wo.partials = {std::string()};
  const ChunkRoute route{std::move(ranks), ctx.split(), o.writer_count};
  wo.consumer = forward_to_writer_group(ctx.transit, route, o.transit_queue, ctx.layout,
                                        ctx.transit_tally, own);
  return wo;
}

// The exchange's receiving side: its own writers, and a thread taking the
// other streamers' chunks for them, started before the forwarding writers
// that hand them this streamer's own. It holds nothing of the Context, which
// a failing streamer destroys while it may still run. Should it fail, the
// streamer's forwarding queue fails too (ChunkExchange::Shared), so the
// streamer's next push, or its finish, throws and the job ends.
void open_exchange(Context& ctx) {
  auto& ex = *(ctx.exchange = std::make_unique<ChunkExchange>());
  ex.writers = std::make_unique<Writers>(own_writers(ctx), ctx.layout);
  ex.receiver =
      std::thread([shared = ex.shared, comm = ctx.transit, senders = ctx.roles.streamers,
                   slots = ctx.options.transit_queue, layout = ctx.layout, &own = *ex.writers] {
        try {
          TimeSeries none;  // the rank's time line is its main thread's
          shared->received = receive_from_streamers(comm, senders, slots, layout, own, none);
        } catch (const std::exception& e) {
          shared->fail(std::string("receiving the streamers' chunks: ") + e.what());
        }
      });
}

// After the forwarding writers have finished (this streamer's end sent to
// every streamer): the receiver ends once every streamer's end is in.
std::vector<storage::WriteStats> finish_exchange(Context& ctx) {
  auto& ex = *ctx.exchange;
  ex.receiver.join();
  if (!ex.shared->failure.empty()) throw std::runtime_error(ex.shared->failure);
  return ex.writers->finish();
}

}  // namespace

void ChunkExchange::Shared::attach(Writers* w) {
  const std::lock_guard<std::mutex> hold(lock);
  forwarding = w;
  if (!failure.empty()) w->fail(failure);
}

void ChunkExchange::Shared::fail(const std::string& message) {
  const std::lock_guard<std::mutex> hold(lock);
  failure = message;
  if (forwarding) forwarding->fail(message);
}

void open_writers(Context& ctx) {
  // Without visibilities, or with the network alone, there is nothing to
  // write: an empty layout and no writers.
  ctx.layout = {};
  ctx.layout.time_chunk = ctx.layout.freq_chunk = 1;
  if (!ctx.job.obs || ctx.options.network_only) return;
  const auto& o = ctx.options;
  ctx.layout = storage::layout_of(*ctx.job.obs);
  auto pv = job::provenance(ctx.job, o.rec_set, o.seed, o.synthetic_vis, ctx.nonce);
  pv.stonewalled = o.duration.has_value();
  pv.command_line = o.command_line;
  pv.started = ctx.started;
  pv.host = host_name();
  ctx.layout.provenance = pv;
  std::vector<int> ranks;
  if (ctx.roles.writers > 0 && ctx.roles.is_streamer()) {
    for (int k = 0; k < ctx.roles.writers; ++k) ranks.push_back(ctx.roles.writer_rank(k));
  } else if (ctx.exchanges_chunks()) {
    for (int k = 0; k < ctx.roles.streamers; ++k) ranks.push_back(ctx.roles.streamer_rank(k));
  }
  if (ctx.exchanges_chunks()) open_exchange(ctx);
  Writers* own = ctx.exchange ? ctx.exchange->writers.get() : nullptr;
  ctx.writers = std::make_unique<Writers>(
      ranks.empty() ? own_writers(ctx) : forwarding_writers(ctx, std::move(ranks), own),
      ctx.layout);
  if (ctx.exchange) ctx.exchange->shared->attach(ctx.writers.get());
}

void wait_writers_opened(Context& ctx) {
  if (ctx.writers) ctx.writers->wait_opened();  // a failure aborts the job
  if (ctx.exchange) ctx.exchange->writers->wait_opened();
}

void finish_writers(Context& ctx, RankResult& out) {
  auto& st = out.stats;
  Writers& writers = *ctx.writers;
  out.queue_wait_s = writers.wait_s();
  auto stats = writers.finish();
  if (ctx.exchange) {
    const auto own = finish_exchange(ctx);
    stats.insert(stats.end(), own.begin(), own.end());
    st.bytes_received += ctx.exchange->shared->received.bytes;
  }
  for (const auto& w : stats) {
    st.bytes_written += w.bytes;
    st.chunks_written += w.chunks_written;
    st.chunks_rewritten += w.chunks_rewritten;
    st.write_s += w.seconds;
    st.sync_s += w.sync_s;
    st.open_s = std::max(st.open_s, w.open_s);
    out.visibilities_written += w.visibilities;
  }
  st.visibility_queue_max = writers.high_water();
}

RankResult run_writer_rank(Context& ctx) {
  RankResult out;
  auto& st = out.stats;
  const auto t0 = Clock::now();
  Writers& writers = *ctx.writers;
  const auto got =
      receive_from_streamers(ctx.transit, ctx.roles.streamers, ctx.options.transit_queue,
                             ctx.layout, writers, ctx.timeline);
  finish_writers(ctx, out);
  st.bytes_received = got.bytes;
  out.transit_chunks = got.chunks;
  out.transit_bytes = got.bytes;
  out.transit_idle_s = got.idle_s;
  const double total = seconds_since(t0);
  st.wait_s = out.queue_wait_s;
  st.idle_s = got.idle_s;
  st.busy_s = std::max(0.0, total - st.wait_s - st.idle_s);
  ctx.timeline.finish({st.wait_s, got.idle_s, 0, 0, writers.taken_bytes()});
  return out;
}

}  // namespace iotest::pipeline
