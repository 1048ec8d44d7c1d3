// --synthetic-vis=sequential: the storage ceiling, as IOR writes. No walk,
// no parts: streamer k of S writes row chunks [k R / S, (k + 1) R / S),
// every frequency chunk of each, whole and once, in file order, with the
// synthetic pattern, through the same writers, queues and back-ends as a
// run. Against --synthetic-vis (the walk's completion order) it shows what
// the order the pipeline completes chunks in costs the disk.
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/pipeline/roles.hpp"

namespace iotest::pipeline {

RankResult run_file_order_streamer(Context& ctx) {
  RankResult out;
  auto& st = out.stats;
  const storage::VisibilityLayout& layout = ctx.layout;
  const index_t streamers = ctx.roles.streamers, me = ctx.roles.streamer_index();
  const index_t row_chunks = layout.row_chunks();
  const index_t tc = layout.time_chunk, fc = layout.freq_chunk;
  index_t written = 0;
  const auto totals = [&]() -> StageTotals {
    return {ctx.writers->wait_s(), 0, written, 0, ctx.writers->taken_bytes()};
  };
  const auto t_start = Clock::now();
  for (index_t r = me * row_chunks / streamers; r < (me + 1) * row_chunks / streamers; ++r) {
    const index_t rows = std::min(tc, layout.rows() - r * tc);
    for (index_t f = 0; f < layout.freq_chunks(); ++f) {
      const index_t channels = std::min(fc, layout.channels - f * fc);
      // Made in the writer's queue, as the walk's synthetic chunks are.
      const storage::ChunkKey key{r, f};
      ctx.writers->write_made(key, rows * channels, nullptr,
                              [&](void* values, storage::StoredForm form) {
                                return degrid::synthesize_chunk(layout, key, ctx.nonce, nullptr,
                                                                values, form);
                              });
      written += rows * channels;
      ctx.timeline.sample(totals);
    }
  }
  finish_writers(ctx, out);
  st.visibilities = written;
  st.wait_s = out.queue_wait_s;
  st.busy_s = std::max(0.0, seconds_since(t_start) - st.wait_s);
  ctx.timeline.finish(totals());
  return out;
}

}  // namespace iotest::pipeline
