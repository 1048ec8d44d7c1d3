#include "iotest/storage/output/output_claim.hpp"

#include <stdexcept>

namespace iotest::storage {

void publish(OutputClaim& claim) {
  const std::string clash = claim.take();
  if (clash.empty()) return claim.commit();
  const std::string kept = claim.keep();
  throw std::runtime_error(clash + (kept.empty() ? "; this output is dropped"
                                                 : "; this output is kept as '" + kept + "'"));
}

}  // namespace iotest::storage
