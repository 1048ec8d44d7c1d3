// The SwiFTly window: the order-0 prolate spheroidal wave function (PSWF),
// computed here from its Legendre expansion (no tables read from files).
#pragma once

#include <vector>

#include "iotest/common/array.hpp"

namespace iotest::swiftly {

// Order-0 PSWF psi_0(c, x) on [-1, 1], normalised to psi(0) = 1.
class Pswf {
 public:
  explicit Pswf(double c);
  double operator()(double x) const;  // the window: psi inside (-1, 1), 0 elsewhere
  double evaluate(double x) const;    // psi itself on the closed interval [-1, 1]
  double c() const { return c_; }

 private:
  double c_;
  std::vector<double> coeffs_;  // on the orthonormal Legendre P_0, P_2, P_4, ...
  double scale_ = 1;
};

// The window of width W (facet-grid cells, c = W*pi/2) sampled on `size`
// points y in [-size/2, size/2) at x = 2y/size; entry y + size/2.
std::vector<double> sample_window(double W, index_t size);

}  // namespace iotest::swiftly
