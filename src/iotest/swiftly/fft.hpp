// A small owner for FFTW plans. Plans are made once (planning is not
// thread-safe) and executed with fftw_execute_dft on other arrays of the same
// layout and alignment, which is thread-safe.
#pragma once

#include <fftw3.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "iotest/common/array.hpp"

namespace iotest::swiftly {

// FFTW's version ("fftw-3.3.10-sse2-avx"), for the reports.
inline std::string fftw_library_version() {
  return ::fftw_version;
}

class FftPlan {
 public:
  FftPlan() = default;
  explicit FftPlan(fftw_plan plan) : plan_(plan) {
    if (!plan_) throw std::runtime_error("FFTW could not create a plan");
  }
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  FftPlan(FftPlan&& o) noexcept : plan_(std::exchange(o.plan_, nullptr)) {}
  FftPlan& operator=(FftPlan&& o) noexcept {
    std::swap(plan_, o.plan_);
    return *this;
  }
  ~FftPlan() {
    if (plan_) fftw_destroy_plan(plan_);
  }

  // A plan left unmade (a Recombination for the other direction) is a
  // caller's mistake, reported rather than crashing in FFTW.
  void execute(cplx* in, cplx* out) const {
    if (!plan_) throw std::logic_error("an FFT plan was not made for this direction");
    fftw_execute_dft(plan_, reinterpret_cast<fftw_complex*>(in),
                     reinterpret_cast<fftw_complex*>(out));
  }
  void execute(cplx* inout) const { execute(inout, inout); }

 private:
  fftw_plan plan_ = nullptr;
};

// Plan `howmany` 1-D transforms of length n with the given strides.
inline FftPlan plan_many(int n, int howmany, cplx* in, int istride, int idist, cplx* out,
                         int ostride, int odist, int sign, unsigned flags) {
  return FftPlan(fftw_plan_many_dft(1, &n, howmany, reinterpret_cast<fftw_complex*>(in), nullptr,
                                    istride, idist, reinterpret_cast<fftw_complex*>(out), nullptr,
                                    ostride, odist, sign, flags));
}

// FFTW's wisdom (what FFTW_MEASURE learnt) as text, and back: processes
// on one node can measure once and share the result. Import returns false
// for text FFTW does not accept.
inline std::string export_fft_wisdom() {
  const std::unique_ptr<char, decltype(&fftw_free)> text(fftw_export_wisdom_to_string(),
                                                         &fftw_free);
  return text ? std::string(text.get()) : std::string();
}
inline bool import_fft_wisdom(const std::string& text) {
  return fftw_import_wisdom_from_string(text.c_str()) != 0;
}

// FFT work in the customary 5 n log2 n flops per complex transform of length n.
double fft_flops(double n);

}  // namespace iotest::swiftly
