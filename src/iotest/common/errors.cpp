#include "iotest/common/errors.hpp"

namespace iotest {

std::string UsageError::one_line() const {
  return option_.empty() ? std::string(what()) : option_ + ": " + what();
}

}  // namespace iotest
