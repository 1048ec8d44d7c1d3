#include "iotest/swiftly/window.hpp"

#include <lapacke.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace iotest::swiftly {
namespace {

// Sum_k coeffs[k] * Pbar_{2k}(x), Pbar_n = sqrt(n + 1/2) P_n (orthonormal).
double legendre_even_series(const std::vector<double>& coeffs, double x) {
  double p_prev = 1.0, p = x;  // P_0, P_1
  double sum = coeffs[0] * std::sqrt(0.5);
  const index_t n_max = 2 * static_cast<index_t>(coeffs.size()) - 2;
  for (index_t n = 1; n < n_max; ++n) {
    const double dn = static_cast<double>(n);
    const double p_next = ((2 * dn + 1) * x * p - dn * p_prev) / (dn + 1);
    p_prev = p;
    p = p_next;
    if ((n + 1) % 2 == 0) sum += coeffs[static_cast<size_t>((n + 1) / 2)] * std::sqrt(dn + 1.5) * p;
  }
  return sum;
}

}  // namespace

Pswf::Pswf(double c) : c_(c) {
  // psi_0 is the eigenfunction of L = -d/dx (1-x^2) d/dx + c^2 x^2 with the
  // smallest eigenvalue. On the even orthonormal Legendre functions L is
  // symmetric tridiagonal; the coefficients decay super-exponentially once
  // n exceeds c, so c + 40 terms are ample.
  const int terms = static_cast<int>(c) + 40;
  std::vector<double> diag(static_cast<size_t>(terms)), off(static_cast<size_t>(terms - 1));
  const double c2 = c * c;
  for (int k = 0; k < terms; ++k) {
    const double n = 2.0 * k;
    diag[static_cast<size_t>(k)] =
        n * (n + 1) + c2 * (2 * n * (n + 1) - 1) / ((2 * n - 1) * (2 * n + 3));
    if (k + 1 < terms)
      off[static_cast<size_t>(k)] =
          c2 * (n + 1) * (n + 2) / ((2 * n + 3) * std::sqrt((2 * n + 1) * (2 * n + 5)));
  }
  std::vector<double> vectors(static_cast<size_t>(terms) * static_cast<size_t>(terms));
  const int info =
      LAPACKE_dstev(LAPACK_COL_MAJOR, 'V', terms, diag.data(), off.data(), vectors.data(), terms);
  if (info != 0) throw std::runtime_error("PSWF: LAPACKE_dstev failed");
  // Eigenvalues come sorted ascending: column 0 belongs to psi_0.
  coeffs_.assign(vectors.begin(), vectors.begin() + terms);
  scale_ = 1.0 / legendre_even_series(coeffs_, 0.0);
}

double Pswf::evaluate(double x) const {
  return scale_ * legendre_even_series(coeffs_, x);
}

double Pswf::operator()(double x) const {
  return std::abs(x) < 1.0 ? evaluate(x) : 0.0;
}

std::vector<double> sample_window(double W, index_t size) {
  const Pswf pswf(W * std::numbers::pi / 2);
  std::vector<double> out(static_cast<size_t>(size));
  for (index_t i = 0; i < size; ++i)
    out[static_cast<size_t>(i)] =
        pswf(2.0 * static_cast<double>(i - size / 2) / static_cast<double>(size));
  return out;
}

}  // namespace iotest::swiftly
