// Errors that reach the user. A UsageError names the option at fault and what
// was expected; the executable prints it on one line and exits with status 2.
#pragma once

#include <stdexcept>
#include <string>

namespace iotest {

class UsageError : public std::runtime_error {
 public:
  UsageError(std::string option, const std::string& message)
      : std::runtime_error(message), option_(std::move(option)) {}
  const std::string& option() const { return option_; }
  // "--rec-set: unknown recombination set 'x' (expected ...)"
  std::string one_line() const;

 private:
  std::string option_;
};

// A failure every rank of a job agreed on (a clash found while publishing
// the outputs): rank 0 says it once and every rank leaves with
// kExitFailure, with no MPI_Abort.
class AgreedFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit statuses of the iotest executable.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a run that could not complete
inline constexpr int kExitUsage = 2;    // bad options or a job this machine cannot hold

}  // namespace iotest
