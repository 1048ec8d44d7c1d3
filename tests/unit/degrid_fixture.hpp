// What the degridding tests share (test_grid.cpp, test_gpu.cpp): a job's
// recombination, degridder and binner built once, random values and the
// inner product the adjointness tests take.
#pragma once

#include <fftw3.h>

#include <complex>
#include <random>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/degrid/degridder.hpp"
#include "iotest/job/job.hpp"
#include "iotest/swiftly/core.hpp"

namespace iotest::test {

inline std::vector<cplx> random_values(index_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<cplx> v(static_cast<size_t>(n));
  for (auto& x : v) x = {normal(rng), normal(rng)};
  return v;
}

// <a, b> = sum conj(a) b.
inline cplx dot(const cplx* a, const cplx* b, index_t n) {
  cplx s = 0;
  for (index_t i = 0; i < n; ++i) s += std::conj(a[i]) * b[i];
  return s;
}

struct DegridFixture {
  job::Job job;
  swiftly::Recombination rec;
  degrid::Degridder degridder;
  binning::Binner binner;
  explicit DegridFixture(job::Job j)
      : job(std::move(j)),
        rec(job.p, FFTW_ESTIMATE),
        degridder(rec, *job.geometry, *job.obs, job.kernel, job.w),
        binner(job.p, *job.obs, *job.geometry, job.split()) {}
};

}  // namespace iotest::test
