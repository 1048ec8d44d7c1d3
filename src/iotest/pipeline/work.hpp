// The walk every rank agrees on, without MPI: which (w-stack, subgrid)
// pairs are visited in which order, how the busy ones are split over
// several streamers, and (static assignment) which streamer takes each
// part. Every rank computes the same plan from the same inputs.
#pragma once

#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/config/rec_set.hpp"

namespace iotest::pipeline {

// No w-stack yet. Not -1: the planes run from below zero (a layout whose
// w range is centred has stacks -1, 0, 1), and a walk starting on stack
// -1 took -1 for "prepared" and predicted from facets never filled.
inline constexpr index_t kNoStack = std::numeric_limits<index_t>::min();

// One subgrid of one w-stacking plane: the unit producers send.
struct Visit {
  index_t stack = 0, subgrid = 0;
  index_t visibilities = 0;
  index_t first_part = 0, parts = 1;  // its parts: parts[first_part, first_part + parts)
};

// What one streamer degrids of a visit: part `part` of its runs, cut at row
// chunks into `parts` ranges of about equal visibility counts.
struct Part {
  index_t visit = 0;
  index_t part = 0;
  index_t visibilities = 0;  // estimate: the visit's share
  int streamer = -1;         // streamer index (not rank); -1 until assigned
};

struct WorkPlan {
  std::vector<Visit> visits;  // walk order: stack, subgrid column, subgrid
  std::vector<Part> parts;    // in the visits' order
};

// `per_visit`: visibilities per (stack, subgrid); empty: every subgrid once
// on stack 0 (a recombination without visibilities). A visit holding more
// than half a streamer's fair share of the visibilities is split into up
// to `streamers` parts. With `assign`, parts go to the least loaded
// streamers (distinct streamers for the parts of one visit).
WorkPlan plan_work(const config::RecombinationParams& p,
                   const std::map<std::pair<index_t, index_t>, index_t>& per_visit, int streamers,
                   bool assign);

// The cost model of the static assignment, in visibility equivalents: a
// part's visibilities plus the work of assembling its subgrid and tower.
index_t part_cost(const config::RecombinationParams& p, index_t visibilities);

}  // namespace iotest::pipeline
