// Recombination sets: the names users know (`image-facet-subgrid`, aliases,
// T05_) resolved to full SwiFTly parameters. The rule and its reasons are in
// docs/recombination-sets.md; the facet count of every published set is
// pinned by its family (N/yN, xM), see published_facets_per_axis().
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "iotest/common/array.hpp"

namespace iotest::config {

// Used fraction of the image (DESIGN.md section 3: f = 0.75). Facets tile only
// the central f*N pixels per axis; the outer band stays empty, which is what
// later gridding needs and what lets every family reach yB/yN <= 1/2.
inline constexpr index_t kUsedFractionNum = 3;
inline constexpr index_t kUsedFractionDen = 4;

// Parameters of one recombination, per axis (2-D uses the same on both axes).
// Names follow the SwiFTly papers and DESIGN.md section 7.
struct RecombinationParams {
  std::string name;       // as the user wrote it (alias or canonical)
  std::string canonical;  // image-facet-subgrid, e.g. 16k-8k-512
  index_t N = 0;          // image / grid size
  index_t yB = 0;         // true facet size
  index_t yN = 0;         // padded facet size (facet FFT length)
  index_t xA = 0;         // usable subgrid size
  index_t xM = 0;         // padded subgrid size
  double W = 0;           // PSWF width in facet-grid cells (c = W*pi/2)
  double f = 0;           // used fraction of the image
  index_t m = 0;          // contribution size xM*yN/N (facet-subgrid message is m x m)

  index_t used_size = 0;  // f*N: the image width the facets cover
  index_t facets_per_axis = 0;
  index_t facet_step = 0;  // distance between facet centres
  index_t subgrids_per_axis = 0;
  index_t subgrid_step = 0;         // distance between subgrid centres
  index_t facet_granularity = 0;    // facet offsets are multiples of this: N/gcd(N,xM)
  index_t subgrid_granularity = 0;  // subgrid offsets: N/gcd(N,yN)
  index_t margin = 0;  // cells of every subgrid left outside its tile (degridding needs them)

  index_t facet_count() const { return facets_per_axis * facets_per_axis; }
  index_t subgrid_count() const { return subgrids_per_axis * subgrids_per_axis; }
  // Share of the transferred contribution data that is useful, per axis.
  double wire_efficiency_per_axis() const;
  index_t image_bytes() const { return N * N * static_cast<index_t>(sizeof(cplx)); }
};

// Resolves a --rec-set value; throws UsageError("--rec-set", ...) for unknown
// names, malformed sizes or sizes that break a constraint.
// What a run may change of the rule's parameters.
struct Overrides {
  // The rule's W (an expert knob: accuracy against usable subgrid area);
  // xA and the subgrid step follow from it.
  std::optional<double> window_width;
  // Subgrid cells kept outside the tiles, so that a visibility's kernel and
  // its w-tower spread stay inside the subgrid: the step is at most xA - margin.
  index_t margin = 0;
};

RecombinationParams resolve_rec_set(std::string_view name, const Overrides& overrides = {});

// Full parameters from the three sizes of a set name and a facet count per
// axis, following the documented rule. Throws UsageError on violations.
RecombinationParams derive_params(std::string_view name, index_t N, index_t yN, index_t xM,
                                  index_t facets_per_axis, const Overrides& overrides = {});

// Facets per axis of the published family (N/yN, xM), or nothing when the
// family is not one of the 36 published ones.
std::optional<index_t> published_facets_per_axis(index_t N, index_t yN, index_t xM);

// Facets per axis for sets outside the published families: yB/yN close to 1/2.
index_t default_facets_per_axis(index_t N, index_t yN);

// Window width for a facet fill yB/yN: the smallest W (in steps of 1/2) that
// brings the recombination error below ~5e-13 (see the docs for why not more).
double window_width_for(double facet_fill);

struct Alias {
  std::string_view name;
  std::string_view canonical;
};
const std::vector<Alias>& aliases();

// "16k" -> 16384, "7680" -> 7680; nothing for malformed sizes.
std::optional<index_t> parse_size(std::string_view text);
// 16384 -> "16k", 7680 -> "7680" (inverse of parse_size for set names).
std::string format_size(index_t size);

}  // namespace iotest::config
