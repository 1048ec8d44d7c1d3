#include "iotest/pipeline/time_series.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace iotest::pipeline {
namespace {

Clock::duration as_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

void TimeSeries::start(double interval_s, Clock::time_point start) {
  interval_s_ = interval_s;
  start_ = start;
  next_ = start + as_duration(interval_s);
  samples_.clear();
  if (interval_s > 0) samples_.push_back({0.0, {}});
}

void TimeSeries::keep(const StageTotals& totals) {
  const auto now = Clock::now();
  samples_.push_back({std::chrono::duration<double>(now - start_).count(), totals});
  if (samples_.size() > kMaxSamples) {  // every other one goes; the first and last stay
    size_t kept = 1;
    for (size_t i = 2; i + 1 < samples_.size(); i += 2) samples_[kept++] = samples_[i];
    samples_[kept++] = samples_.back();
    samples_.resize(kept);
    interval_s_ *= 2;
  }
  next_ = now + as_duration(interval_s_);
}

void TimeSeries::finish(const StageTotals& totals) {
  if (interval_s_ > 0) keep(totals);
}

IntervalFigures per_interval(const std::vector<TimeSample>& samples, double interval_s) {
  IntervalFigures out;
  if (samples.size() < 2 || interval_s <= 0) return out;
  const double end = samples.back().t;
  const auto bins = static_cast<size_t>(std::max(1.0, std::ceil(end / interval_s - 1e-9)));
  std::vector<double> wait(bins), idle(bins), vis(bins), sent(bins), written(bins);
  for (size_t k = 1; k < samples.size(); ++k) {
    const auto &a = samples[k - 1], &b = samples[k];
    const double span = b.t - a.t;
    if (span <= 0) continue;
    const double d[] = {b.totals.wait_s - a.totals.wait_s, b.totals.idle_s - a.totals.idle_s,
                        static_cast<double>(b.totals.visibilities - a.totals.visibilities),
                        static_cast<double>(b.totals.bytes_sent - a.totals.bytes_sent),
                        static_cast<double>(b.totals.bytes_written - a.totals.bytes_written)};
    std::vector<double>* into[] = {&wait, &idle, &vis, &sent, &written};
    const auto first = static_cast<size_t>(a.t / interval_s);
    for (size_t i = first; i < bins && i * interval_s < b.t; ++i) {
      const double lo = std::max(a.t, i * interval_s), hi = std::min(b.t, (i + 1) * interval_s);
      if (hi <= lo) continue;
      const double share = (hi - lo) / span;
      for (size_t s = 0; s < 5; ++s) (*into[s])[i] += d[s] * share;
    }
  }
  for (size_t i = 0; i < bins; ++i) {
    const double length = std::min(interval_s, end - i * interval_s);
    out.wait_s.push_back(wait[i]);
    out.busy_s.push_back(std::max(0.0, length - wait[i] - idle[i]));
    out.visibilities.push_back(std::llround(vis[i]));
    out.bytes_sent.push_back(std::llround(sent[i]));
    out.bytes_written.push_back(std::llround(written[i]));
  }
  return out;
}

}  // namespace iotest::pipeline
