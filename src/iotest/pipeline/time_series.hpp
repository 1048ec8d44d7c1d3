// A rank's figures over a run (issue 12's time line): its main thread's
// waits and what it moved, as running totals sampled where the role loops
// anyway, so nothing runs beside it and nothing is ever busy-waited. A
// sample is kept once --interval seconds have passed since the last;
// memory grows with the run's length only, and is capped: past
// kMaxSamples every other sample goes and the spacing doubles.
#pragma once

#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/common/system.hpp"

namespace iotest::pipeline {

// Running totals since the start (what the role's counters say).
struct StageTotals {
  double wait_s = 0;  // waiting on other ranks (or, on a streamer, its writers)
  double idle_s = 0;  // nothing to do
  index_t visibilities = 0, bytes_sent = 0, bytes_written = 0;
};

struct TimeSample {
  double t = 0;  // seconds since the start
  StageTotals totals;
};

class TimeSeries {
 public:
  static constexpr size_t kMaxSamples = 4096;
  // Starts at `start` with zero totals; `interval_s` <= 0: no samples.
  void start(double interval_s, Clock::time_point start);
  // Keeps totals() (a StageTotals) if an interval has passed since the
  // last sample: called as often as the role loops, it reads its counters
  // only then.
  template <class Totals>
  void sample(const Totals& totals) {
    if (interval_s_ > 0 && Clock::now() >= next_) keep(totals());
  }
  // The last sample, at the role's end.
  void finish(const StageTotals& totals);
  const std::vector<TimeSample>& samples() const { return samples_; }

 private:
  void keep(const StageTotals& totals);
  double interval_s_ = 0;
  Clock::time_point start_, next_;
  std::vector<TimeSample> samples_;
};

// Per interval of `interval_s` from 0 to the last sample: each stage's
// amount, the difference between samples spread evenly over the time
// between them. Busy = the interval's length - wait - idle.
struct IntervalFigures {
  std::vector<double> busy_s, wait_s;
  std::vector<index_t> visibilities, bytes_sent, bytes_written;
};
IntervalFigures per_interval(const std::vector<TimeSample>& samples, double interval_s);

}  // namespace iotest::pipeline
