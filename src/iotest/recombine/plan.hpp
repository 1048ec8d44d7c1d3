// `iotest plan`: resolved parameters, counts, memory per role and the rank
// count for a recombination set, without computing anything heavy.
#pragma once

#include <optional>
#include <string>

#include "iotest/report/report.hpp"

namespace iotest::recombine {

// Queue depths the memory estimates assume (DESIGN.md section 2 defaults).
inline constexpr index_t kDefaultSendQueue = 8;
inline constexpr index_t kDefaultSubgridQueue = 32;

report::Memory estimate_memory(const config::RecombinationParams& p, int threads);

// Bytes this machine can still give (MemAvailable), or a negative value when unknown.
index_t available_memory_bytes();

report::Report plan(const std::string& rec_set, index_t nodes,
                    std::optional<double> window_width = std::nullopt);

}  // namespace iotest::recombine
