// `iotest net`: the interconnect between pairs of ranks, measured as the
// OSU micro-benchmarks and DiFX's network tests do. Over a sweep of
// message sizes each pair measures, for MPI and for plain TCP sockets
// between the same two processes, the latency (half a blocking ping-pong
// round trip) and the bandwidth (a window of messages streamed, then an
// acknowledgement). All pairs measure at the same time. --check fills
// every message with a pattern of its size and iteration and checks it
// on arrival, in iterations apart from the timed ones (OSU's -c).
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/report/report.hpp"

namespace iotest::net {

struct NetOptions {
  // "A:B,C:D": rank A sends to rank B. None: the first rank of each node
  // with the first of the next (one node: ranks 0:1, 2:3, ...).
  std::optional<std::string> pairs;
  index_t min_size = 1, max_size = index_t{1} << 26;  // bytes; powers of 2 from min
  // Timed and warm-up iterations below 8 KiB; a tenth of them up to 1 MiB,
  // a hundredth above (at least one). None: 1000, and a tenth of the timed.
  std::optional<int> iterations, warmup;
  int window = 64;  // messages in flight per bandwidth iteration
  // Seconds a size's tests may take, timed iterations: each test (latency,
  // bandwidth, per transport) has an equal share. The first iteration of a
  // test measures one; the timed count is then as many of the planned as
  // fit the share, at least 1, and the warm-up scales alike. A bandwidth
  // window holds as many of --window messages as fit the share at the
  // latency test's one-way time for the size. (IMB's -time, per size.)
  double time_per_size = 6;
  std::vector<std::string> transports{"mpi", "tcp"};
  bool check = false;
};

// --pairs against a job of `ranks`: distinct ranks in range, each in one
// pair at most. Throws UsageError("--pairs").
std::vector<std::pair<int, int>> parse_pairs(const std::string& text, int ranks);

// Collective over comm; the report is complete on rank 0. UsageErrors are
// agreed (thrown on every rank); other failures are this rank's alone.
report::Report net(const NetOptions& options, MPI_Comm comm);

}  // namespace iotest::net
