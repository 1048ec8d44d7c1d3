// Checks made on some ranks only, agreed on by all (collective), so every
// rank ends the same way and none waits for a peer that left: the
// pipeline's roles, `iotest net` and `iotest h5` use them.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

namespace iotest {

// The first rank's non-empty message, or empty when every rank passed.
std::string agree_on_error(MPI_Comm comm, const std::string& mine);

// Runs `check`, which may throw UsageError on some ranks only (a path that
// one node cannot write), and agrees on the outcome: the first failing
// rank's error is thrown on every rank, so all end with the usage status.
void agree_on_usage(MPI_Comm comm, const std::function<void()>& check);

}  // namespace iotest
