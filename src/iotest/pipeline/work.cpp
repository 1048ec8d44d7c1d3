#include "iotest/pipeline/work.hpp"

#include <algorithm>
#include <numeric>

namespace iotest::pipeline {

index_t part_cost(const config::RecombinationParams& p, index_t visibilities) {
  // Assembling a subgrid and building its tower is a few FFTs of xM^2: about
  // as long as degridding xM^2 / 4 visibilities (measured on T05_ and small
  // with vlaa; only the balance matters).
  return visibilities + p.xM * p.xM / 4;
}

WorkPlan plan_work(const config::RecombinationParams& p,
                   const std::map<std::pair<index_t, index_t>, index_t>& per_visit, int streamers,
                   bool assign) {
  WorkPlan plan;
  if (per_visit.empty()) {
    for (index_t s = 0; s < p.subgrid_count(); ++s) plan.visits.push_back({0, s, 0, 0, 1});
  } else {
    // std::map orders by (stack, subgrid) = (stack, column, subgrid in column).
    for (const auto& [key, vis] : per_visit)
      plan.visits.push_back({key.first, key.second, vis, 0, 1});
  }
  index_t total = 0;
  for (const auto& v : plan.visits) total += v.visibilities;
  // A visit worth more than half a streamer's fair share of the
  // visibilities is split, so the busy centre keeps every streamer going.
  const index_t share = std::max<index_t>(1, total / std::max(1, 2 * streamers));
  for (index_t k = 0; k < static_cast<index_t>(plan.visits.size()); ++k) {
    auto& v = plan.visits[static_cast<size_t>(k)];
    v.parts = std::clamp<index_t>((v.visibilities + share - 1) / share, 1, std::max(1, streamers));
    v.first_part = static_cast<index_t>(plan.parts.size());
    for (index_t i = 0; i < v.parts; ++i)
      plan.parts.push_back({k, i, v.visibilities / v.parts + (i < v.visibilities % v.parts), -1});
  }
  if (!assign || streamers < 1) return plan;
  std::vector<index_t> load(static_cast<size_t>(streamers), 0);
  std::vector<int> order(static_cast<size_t>(streamers));
  for (const auto& v : plan.visits) {
    // The least loaded streamers take the parts, one part each.
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return load[static_cast<size_t>(a)] < load[static_cast<size_t>(b)];
    });
    for (index_t i = 0; i < v.parts; ++i) {
      auto& part = plan.parts[static_cast<size_t>(v.first_part + i)];
      part.streamer = order[static_cast<size_t>(i)];
      load[static_cast<size_t>(part.streamer)] += part_cost(p, part.visibilities);
    }
  }
  return plan;
}

}  // namespace iotest::pipeline
