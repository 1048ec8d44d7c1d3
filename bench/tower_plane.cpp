// One w-tower plane's parts, timed alone (bench/tower_plane.sh): the phase
// screen and its copy, the 2-D FFT (FFTW's in-place plan, as
// Degridder::build_tower uses through finish_subgrid_in), and the gather of
// the xA x xA centre; then, for comparison, the same transform into an
// xM x xM plane that needs no gather. Sizes: small (16k-8k-512, xA 472).
#include <fftw3.h>

#include <chrono>
#include <complex>
#include <cstdio>
#include <cstring>
#include <vector>

using cplx = std::complex<double>;
using Clock = std::chrono::steady_clock;

namespace {
constexpr int kXM = 512, kXA = 472, kPlanes = 15, kRounds = 20;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
cplx* allocate(int n) { return reinterpret_cast<cplx*>(fftw_alloc_complex(static_cast<size_t>(n))); }

// The xA x xA centre of an xM x xM transform in FFT order.
void gather(const cplx* in, cplx* out) {
  for (int a = 0; a < kXA; ++a) {
    const cplx* row = in + ((a - kXA / 2 + kXM) % kXM) * kXM;
    for (int b = 0; b < kXA; ++b) out[a * kXA + b] = row[(b - kXA / 2 + kXM) % kXM];
  }
}
}  // namespace

int main() {
  const int n = kXM * kXM;
  cplx *image = allocate(n), *step = allocate(n), *screened = allocate(n), *scratch = allocate(n);
  std::vector<cplx*> planes(kPlanes), whole(kPlanes);
  for (auto& p : planes) p = allocate(kXA * kXA);
  for (auto& p : whole) p = allocate(n);
  for (int i = 0; i < n; ++i) {
    image[i] = cplx(i % 7, i % 3);
    step[i] = std::polar(1.0, 1e-3 * i);
  }
  auto* s = reinterpret_cast<fftw_complex*>(scratch);
  const fftw_plan plan = fftw_plan_dft_2d(kXM, kXM, s, s, FFTW_BACKWARD, FFTW_MEASURE);
  double screen_s = 0, fft_s = 0, gather_s = 0, whole_screen_s = 0, whole_fft_s = 0;
  for (int r = 0; r < kRounds; ++r) {
    std::memcpy(screened, image, sizeof(cplx) * n);
    for (int p = 0; p < kPlanes; ++p) {  // as build_tower does
      auto t = Clock::now();
      for (int i = 0; i < n; ++i) scratch[i] = screened[i] *= step[i];
      screen_s += since(t);
      t = Clock::now();
      fftw_execute(plan);
      fft_s += since(t);
      t = Clock::now();
      gather(scratch, planes[static_cast<size_t>(p)]);
      gather_s += since(t);
    }
    std::memcpy(screened, image, sizeof(cplx) * n);
    for (int p = 0; p < kPlanes; ++p) {  // into an xM x xM plane: no gather
      cplx* out = whole[static_cast<size_t>(p)];
      auto t = Clock::now();
      for (int i = 0; i < n; ++i) out[i] = screened[i] *= step[i];
      whole_screen_s += since(t);
      t = Clock::now();
      auto* o = reinterpret_cast<fftw_complex*>(out);
      fftw_execute_dft(plan, o, o);
      whole_fft_s += since(t);
    }
  }
  const double ms = 1e3 / (kRounds * kPlanes);
  std::printf("as built: screen+copy %.3f ms, fft %.3f ms, gather %.3f ms, plane %.3f ms\n",
              screen_s * ms, fft_s * ms, gather_s * ms, (screen_s + fft_s + gather_s) * ms);
  std::printf("xM x xM plane: screen+copy %.3f ms, fft %.3f ms, plane %.3f ms\n",
              whole_screen_s * ms, whole_fft_s * ms, (whole_screen_s + whole_fft_s) * ms);
}
