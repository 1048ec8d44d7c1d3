// Accuracy figures are always relative: RMS(computed - reference) divided by
// RMS(reference) over the same samples. `RelativeError` accumulates both sums
// so figures can be pooled over many subgrids or facets.
#pragma once

#include <cmath>
#include <limits>

#include "iotest/common/array.hpp"

namespace iotest {

struct RelativeError {
  double error_sq = 0;      // sum |computed - reference|^2
  double reference_sq = 0;  // sum |reference|^2

  void add(CView2D computed, CView2D reference) {
    for (index_t r = 0; r < computed.rows; ++r)
      for (index_t c = 0; c < computed.cols; ++c) {
        error_sq += std::norm(computed(r, c) - reference(r, c));
        reference_sq += std::norm(reference(r, c));
      }
  }
  void add(const RelativeError& o) {
    error_sq += o.error_sq;
    reference_sq += o.reference_sq;
  }
  // NaN where the reference is all zero: no relative figure exists there.
  double value() const {
    return reference_sq > 0 ? std::sqrt(error_sq / reference_sq)
                            : std::numeric_limits<double>::quiet_NaN();
  }
};

// Relative errors pooled over items (subgrids, facets), plus the worst item.
struct ErrorTally {
  RelativeError pooled;
  double worst = std::numeric_limits<double>::quiet_NaN();
  index_t items = 0;  // items with a non-zero reference
  void add(const RelativeError& e) {
    pooled.add(e);
    if (e.reference_sq > 0) {
      ++items;
      if (!(e.value() <= worst)) worst = e.value();
    }
  }
};

}  // namespace iotest
