// Visibilities from subgrids: a separable PSWF kernel in u and v, and
// w-towers: from one subgrid's image-space sum, planes at w = p * dw are
// made by a phase screen and an FFT each, and every visibility is
// interpolated from the w_support planes around its w with a PSWF kernel in
// w. Both kernels' transforms are divided out on the facet side
// (correct_facet), so the chain stays exact up to the kernels' accuracy.
#pragma once

#include <complex>
#include <vector>

#include "iotest/binning/binning.hpp"
#include "iotest/degrid/kernel.hpp"
#include "iotest/sky/sky_model.hpp"
#include "iotest/swiftly/core.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::degrid {

struct DegridOptions {
  int support = 12;    // u, v kernel width in cells
  int w_support = 12;  // w kernel width in planes
};

// The w-plane layout of an observation on a grid: plane spacing and the
// centring constant that makes the w kernel's argument symmetric.
struct WPlanes {
  double dw = 0;        // wavelengths between planes
  double centre = 0;    // c0: planes carry exp(2 pi i p dw (n - 1 - c0))
  double n_min = 1;     // n at the corners of the used field
};
WPlanes w_planes(const binning::GridGeometry& g, double x0);

// Cells each subgrid must keep outside its tile for the kernel and the
// tower's spread (the phase screen moves grid values by up to
// |w| l / (n du) cells).
index_t required_margin(const binning::GridGeometry& g, const telescope::Observation& obs,
                        const DegridOptions& o);

class Degridder {
 public:
  Degridder(const swiftly::Recombination& rec, const binning::GridGeometry& g,
            const telescope::Observation& obs, const DegridOptions& o);

  // Divides the facet's non-zero pixels by the kernels' transforms.
  void correct_facet(const swiftly::Tile& t0, const swiftly::Tile& t1, MView2D facet) const;

  struct Workspace {
    Array2D screened, scratch;
    std::vector<Array2D> planes;
    explicit Workspace(const config::RecombinationParams& p);
  };
  // Predicts the visibilities of `runs` (all owned by the subgrid at
  // offsets off0, off1) from its image-space sum, run after run into `out`.
  // Returns the number of w-planes made.
  index_t degrid(CView2D subgrid_sum, index_t off0, index_t off1,
                 const std::vector<binning::VisRun>& runs, Workspace& ws,
                 std::vector<cplx>& out) const;

  // The exact visibility by direct Fourier transform of the sources, with
  // the recombination's normalisation (1 / N^2).
  cplx direct(const std::vector<sky::PointSource>& sources, index_t baseline, index_t time,
              index_t chan) const;

  // Transform and kernel work for the GFLOP/s figure.
  double plane_flops() const;
  double visibility_flops() const;
  const WPlanes& planes() const { return planes_; }

 private:
  telescope::Uvw baseline_uvw(index_t baseline, index_t time) const;

  const swiftly::Recombination& rec_;
  const config::RecombinationParams& p_;
  binning::GridGeometry g_;
  const telescope::Observation& obs_;
  GridKernel uv_kernel_, w_kernel_;
  WPlanes planes_;
  std::vector<std::pair<int, int>> baselines_;
  std::vector<std::vector<telescope::Uvw>> antenna_uvw_;  // [time][antenna], metres
  std::vector<cplx> screen_step_;  // exp(2 pi i dw (n - 1 - c0)) over the subgrid image, FFT order
  std::vector<double> screen_phase_;  // dw (n - 1 - c0) in turns
};

}  // namespace iotest::degrid
