// One w-tower plane's parts, timed alone (bench/tower_plane.sh) on the
// library's own code for `small` (16k-8k-512, xM 512, xA 472): the phase
// screen and its copy (Degridder::build_tower's loop), and the transform
// with the gather of the xA x xA centre (Recombination::finish_subgrid_in,
// the call build_tower makes). The transform alone, in an FFTW plan of the
// same shape and flags, splits the two. Then, for comparison, the same
// transform into an xM x xM plane of its own, which needs no gather.
#include <fftw3.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "iotest/config/rec_set.hpp"
#include "iotest/swiftly/core.hpp"

using iotest::Array2D;
using iotest::cplx;
using iotest::index_t;
using Clock = std::chrono::steady_clock;

namespace {
constexpr int kPlanes = 15, kRounds = 20;  // a dec 34 tower: ~15 planes

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// build_tower's screen: the next plane's screen by one product a pixel, and
// its copy into the transform's scratch.
void screen(cplx* screened, const cplx* step, cplx* out, index_t n) {
  for (index_t i = 0; i < n; ++i) out[i] = screened[i] *= step[i];
}
}  // namespace

int main() {
  const auto p = iotest::config::resolve_rec_set("small");
  const iotest::swiftly::Recombination rec(p);
  const index_t xM = p.xM, n = xM * xM;
  Array2D image = rec.make_subgrid_sum(), step = rec.make_subgrid_sum(),
          screened = rec.make_subgrid_sum(), scratch = rec.make_subgrid_sum();
  std::vector<Array2D> planes, whole;
  for (int k = 0; k < kPlanes; ++k) {
    planes.push_back(rec.make_subgrid());
    whole.push_back(rec.make_subgrid_sum());
  }
  for (index_t i = 0; i < n; ++i) {
    image.data()[i] = cplx(static_cast<double>(i % 7), static_cast<double>(i % 3));
    step.data()[i] = std::polar(1.0, 1e-3 * static_cast<double>(i));
  }
  auto* s = reinterpret_cast<fftw_complex*>(scratch.data());
  const fftw_plan alone = fftw_plan_dft_2d(static_cast<int>(xM), static_cast<int>(xM), s, s,
                                           FFTW_BACKWARD, FFTW_MEASURE);
  double screen_s = 0, finish_s = 0, fft_s = 0, whole_screen_s = 0, whole_fft_s = 0;
  const size_t bytes = sizeof(cplx) * static_cast<size_t>(n);
  for (int r = 0; r < kRounds; ++r) {
    std::memcpy(screened.data(), image.data(), bytes);
    for (auto& plane : planes) {  // as build_tower does
      auto t = Clock::now();
      screen(screened.data(), step.data(), scratch.data(), n);
      screen_s += since(t);
      t = Clock::now();
      rec.finish_subgrid_in(scratch.view(), plane.view());
      finish_s += since(t);
      t = Clock::now();  // the transform alone, on the same (now transformed) values
      fftw_execute(alone);
      fft_s += since(t);
    }
    std::memcpy(screened.data(), image.data(), bytes);
    for (auto& out : whole) {  // into an xM x xM plane: no gather
      auto t = Clock::now();
      screen(screened.data(), step.data(), out.data(), n);
      whole_screen_s += since(t);
      t = Clock::now();
      auto* o = reinterpret_cast<fftw_complex*>(out.data());
      fftw_execute_dft(alone, o, o);
      whole_fft_s += since(t);
    }
  }
  fftw_destroy_plan(alone);
  const double ms = 1e3 / (kRounds * kPlanes);
  std::printf("as built: screen+copy %.3f ms, fft %.3f ms, gather %.3f ms, plane %.3f ms\n",
              screen_s * ms, fft_s * ms, (finish_s - fft_s) * ms, (screen_s + finish_s) * ms);
  std::printf("xM x xM plane: screen+copy %.3f ms, fft %.3f ms, plane %.3f ms\n",
              whole_screen_s * ms, whole_fft_s * ms, (whole_screen_s + whole_fft_s) * ms);
}
