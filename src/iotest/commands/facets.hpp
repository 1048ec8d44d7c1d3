// The facets' side of a walk of the recombination in one process, as
// `iotest recombine`, `iotest degrid` and `iotest grid` take it: where the
// facets lie, a subgrid's sum from the facets' columns (predict), and a
// column's subgrid sums into a facet (image).
#pragma once

#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/swiftly/core.hpp"
#include "iotest/swiftly/tiling.hpp"

namespace iotest::commands::detail {

// Facet f at tiles (f / nf, f % nf) of the facets' axis.
struct FacetTiles {
  std::vector<swiftly::Tile> tiles;  // per axis
  index_t nf = 0;
  explicit FacetTiles(const config::RecombinationParams& p)
      : tiles(swiftly::facet_tiles(p)), nf(p.facets_per_axis) {}
  const swiftly::Tile& t0(index_t f) const { return tiles[static_cast<size_t>(f / nf)]; }
  const swiftly::Tile& t1(index_t f) const { return tiles[static_cast<size_t>(f % nf)]; }
};

// Predict: every facet's contribution to a subgrid at `off1` of the
// column the facets' `columns` were prepared for, added to `sum`.
inline void add_facet_contributions(const swiftly::Recombination& rec, const FacetTiles& facets,
                                    const std::vector<Array2D>& columns, index_t off1,
                                    Array2D& contribution, MView2D sum) {
  for (index_t f = 0; f < static_cast<index_t>(columns.size()); ++f) {
    rec.extract_contribution(columns[static_cast<size_t>(f)].view(), facets.t1(f).offset, off1,
                             contribution.view());
    rec.add_contribution(contribution.view(), facets.t0(f).offset, facets.t1(f).offset, sum);
  }
}

// Image: the `count` subgrid sums of the column at `off0` into facet f,
// each one's contribution added to the facet's column sum, the column
// then finished into the facet's sum. sum(k), off1(k): the k-th subgrid's
// sum and its offset on the second axis.
template <class Sum, class Offset>
void add_column_to_facet(const swiftly::Recombination& rec, const FacetTiles& facets, index_t f,
                         index_t off0, size_t count, Sum&& sum, Offset&& off1,
                         swiftly::ColumnWorkspace& workspace, Array2D& contribution,
                         MView2D column_sum, MView2D facet_sum) {
  for (size_t k = 0; k < count; ++k) {
    rec.extract_from_subgrid(sum(k), facets.t0(f).offset, facets.t1(f).offset, contribution.view());
    rec.add_to_column(contribution.view(), facets.t1(f).offset, off1(k), column_sum);
  }
  rec.finish_column(column_sum, facets.t0(f).offset, off0, workspace, facet_sum);
}

}  // namespace iotest::commands::detail
