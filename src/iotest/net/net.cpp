#include "iotest/net/net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <string_view>

#include "iotest/common/errors.hpp"
#include "iotest/common/mpi_agree.hpp"
#include "iotest/common/mpi_wait.hpp"
#include "iotest/common/system.hpp"

namespace iotest::net {
namespace {

using Size = report::Interconnect::Size;

constexpr index_t kMaxSize = index_t{1} << 30;  // MPI counts are ints
// A size's timed bandwidth windows stream at most this much (one window at
// least), so a sweep to 64 MiB takes seconds rather than minutes; warm-up
// windows an eighth of it.
constexpr index_t kStreamBytes = index_t{2} << 30;
// --check: the window's messages land in distinct slots, at most this much.
constexpr index_t kCheckBytes = index_t{64} << 20;
constexpr int kCheckRoundTrips = 2;
constexpr int kMaxWindow = 4096;
constexpr double kMaxTimePerSize = 86400;
constexpr int kConnectTimeoutMs = 5000, kAcceptTimeoutMs = 60000;
constexpr int kTagPing = 1, kTagData = 2, kTagAck = 3, kTagAddress = 4, kTagCount = 5;
constexpr int kTextBytes = 64;  // host names and addresses gathered to rank 0

[[noreturn]] void fail(const std::string& call) {
  throw std::runtime_error("TCP: " + call + " failed: " + std::strerror(errno));
}

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }
  int fd() const { return fd_; }

 private:
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

// MSG_NOSIGNAL: a peer gone is an error here, not a SIGPIPE.
void send_all(int fd, const std::byte* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) fail("send");
    data += sent;
    n -= static_cast<size_t>(sent);
  }
}

void recv_all(int fd, std::byte* data, size_t n) {
  while (n > 0) {
    const ssize_t got = ::recv(fd, data, n, MSG_WAITALL);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("recv");
    if (got == 0) throw std::runtime_error("TCP: the peer closed the connection");
    data += got;
    n -= static_cast<size_t>(got);
  }
}

int poll_one(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n >= 0) return n;
    if (errno != EINTR) fail("poll");
  }
}

void set_no_delay(int fd) {
  const int on = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) != 0)
    fail("setsockopt(TCP_NODELAY)");
}

// Every interface, an ephemeral port.
Socket listen_any(int& port) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail("bind");
  if (::listen(s.fd(), 1) != 0) fail("listen");
  socklen_t length = sizeof address;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail("getsockname");
  port = ntohs(address.sin_port);
  return s;
}

// The sender is never told to stop trying, so the wait is bounded.
Socket accept_within(const Socket& listener, int timeout_ms) {
  if (poll_one(listener.fd(), POLLIN, timeout_ms) == 0)
    throw std::runtime_error(
        fmt::format("TCP: no connection from the sender within {} s", timeout_ms / 1000));
  Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  if (s.fd() < 0) fail("accept");
  return s;
}

// The first of `addresses` that answers within the timeout (an address of
// another network may never answer); `reached` names it.
Socket connect_first(const std::vector<std::string>& addresses, int port, std::string& reached) {
  std::string why = "no IPv4 address";
  for (const auto& a : addresses) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::inet_pton(AF_INET, a.c_str(), &address.sin_addr) != 1) {
      why = a + ": not an IPv4 address";
      continue;
    }
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.fd() < 0) fail("socket");
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      if (errno != EINPROGRESS) {
        why = a + ": " + std::strerror(errno);
        continue;
      }
      if (poll_one(s.fd(), POLLOUT, kConnectTimeoutMs) == 0) {
        why = a + ": timed out";
        continue;
      }
      int error = 0;
      socklen_t length = sizeof error;
      if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &length) != 0)
        fail("getsockopt(SO_ERROR)");
      if (error != 0) {
        why = a + ": " + std::strerror(error);
        continue;
      }
    }
    const int flags = ::fcntl(s.fd(), F_GETFL);
    if (flags < 0 || ::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK) != 0) fail("fcntl");
    reached = fmt::format("{}:{}", a, port);
    return s;
  }
  throw std::runtime_error(
      fmt::format("TCP: could not reach the receiver on port {} ({})", port, why));
}

// This host's IPv4 addresses on interfaces that are up, loopback left out.
std::vector<std::string> interface_addresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) fail("getifaddrs");
  std::vector<std::string> addresses;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) addresses.emplace_back(text);
  }
  ::freeifaddrs(list);
  return addresses;
}

// Page-aligned as OSU's buffers, and touched, so no page fault lands in a
// timing.
using Bytes = std::unique_ptr<std::byte, decltype(&std::free)>;
Bytes page_aligned(index_t bytes) {
  const size_t n = (static_cast<size_t>(std::max<index_t>(bytes, 1)) + 4095) / 4096 * 4096;
  Bytes b(static_cast<std::byte*>(std::aligned_alloc(4096, n)), &std::free);
  if (!b) throw std::bad_alloc();
  std::memset(b.get(), 0xa5, n);
  return b;
}

// --check: a message's bytes follow from its size, its iteration and its
// place in the window, so a stale, shifted or misplaced message is wrong.
std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
std::uint64_t seed(index_t bytes, int iteration, int message) {
  return mix(mix(mix(static_cast<std::uint64_t>(bytes)) ^ static_cast<std::uint64_t>(iteration)) ^
             static_cast<std::uint64_t>(message));
}
void fill(std::byte* p, index_t bytes, std::uint64_t s) {
  for (index_t i = 0; i < bytes; i += 8) {
    const std::uint64_t word = mix(s + static_cast<std::uint64_t>(i));
    std::memcpy(p + i, &word, static_cast<size_t>(std::min<index_t>(8, bytes - i)));
  }
}
bool holds(const std::byte* p, index_t bytes, std::uint64_t s) {
  for (index_t i = 0; i < bytes; i += 8) {
    const std::uint64_t word = mix(s + static_cast<std::uint64_t>(i));
    if (std::memcmp(p + i, &word, static_cast<size_t>(std::min<index_t>(8, bytes - i))) != 0)
      return false;
  }
  return true;
}

struct Tally {
  index_t checked = 0, wrong = 0;
  void add(bool right) {
    ++checked;
    if (!right) ++wrong;
  }
};

// This rank's side of its pair.
struct Link {
  MPI_Comm comm = MPI_COMM_NULL;
  int peer = -1;
  bool sender = false;  // the bandwidth flows from the sender; it times both tests
  Socket tcp;
  std::byte *out = nullptr, *in = nullptr, *slots = nullptr;
};

int count(index_t bytes) {
  return static_cast<int>(bytes);
}

// The counts a test used: the sender decides them, the receiver is told
// (untimed, on the pair's communicator), so both run as many iterations.
struct Used {
  int warmup = 0, iterations = 0;
};

void agree(const Link& l, int* values, int n) {
  if (l.sender)
    MPI_Send(values, n, MPI_INT, l.peer, kTagCount, l.comm);
  else
    MPI_Recv(values, n, MPI_INT, l.peer, kTagCount, l.comm, MPI_STATUS_IGNORE);
}

// As many of `planned` as fit `budget` seconds at `one` second each, at
// least 1; the warm-up scaled alike (at least 1 where any was planned).
Used fit(int planned_warmup, int planned, double budget, double one) {
  const double fits = budget / std::max(one, 1e-12);
  Used u;
  u.iterations = fits >= planned ? planned : std::max(1, static_cast<int>(fits));
  u.warmup =
      planned_warmup == 0
          ? 0
          : std::max(1, static_cast<int>((static_cast<std::int64_t>(planned_warmup) * u.iterations +
                                          planned - 1) /
                                         planned));
  return u;
}

// One test of one size, its counts fitted to `budget` seconds of timed
// iterations. The first iteration (the first warm-up, or the first timed
// one where there is none) measures one; from it the sender fits the
// warm-up and tells the receiver. The warm-ups left then measure again (a
// first iteration alone may have waited on a busy core), and from their
// mean the sender fits the timed count and tells the receiver. Then the
// timed iterations. Returns their seconds, the exchanges left out.
template <class Step>
double run_test(const Link& l, int planned_warmup, int planned, double budget, Used& used,
                Step step) {
  double start = MPI_Wtime();
  step();
  double one = MPI_Wtime() - start;
  if (l.sender) used = fit(planned_warmup, planned, budget, one);
  agree(l, &used.warmup, 1);
  const bool probe_timed = used.warmup == 0;
  if (used.warmup > 1) {
    start = MPI_Wtime();
    for (int i = 1; i < used.warmup; ++i) step();
    one = (MPI_Wtime() - start) / (used.warmup - 1);
  }
  if (l.sender) used.iterations = fit(planned_warmup, planned, budget, one).iterations;
  agree(l, &used.iterations, 1);
  const int timed_left = used.iterations - (probe_timed ? 1 : 0);
  start = MPI_Wtime();
  for (int i = 0; i < timed_left; ++i) step();
  return MPI_Wtime() - start + (probe_timed ? one : 0.0);
}

// Seconds one way: blocking ping-pong, half the round trip (osu_latency).
double mpi_latency(const Link& l, index_t bytes, int warmup, int iterations, double budget,
                   Used& used) {
  const double s = run_test(l, warmup, iterations, budget, used, [&] {
    if (l.sender) {
      MPI_Send(l.out, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm);
      MPI_Recv(l.in, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(l.in, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm, MPI_STATUS_IGNORE);
      MPI_Send(l.out, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm);
    }
  });
  return s / (2.0 * used.iterations);
}

// Bytes per second, sender to receiver: a window of non-blocking sends met
// by as many receives, then a 4-byte acknowledgement (osu_bw). The window's
// receives share one buffer, as OSU's do, so that the figures compare
// (distinct buffers would leave the cache at large windows).
double mpi_bandwidth(const Link& l, index_t bytes, int window, int warmup, int windows,
                     double budget, Used& used) {
  std::vector<MPI_Request> requests(static_cast<size_t>(window));
  std::byte ack[4] = {};
  const double s = run_test(l, warmup, windows, budget, used, [&] {
    for (auto& r : requests) {
      if (l.sender)
        MPI_Isend(l.out, count(bytes), MPI_BYTE, l.peer, kTagData, l.comm, &r);
      else
        MPI_Irecv(l.in, count(bytes), MPI_BYTE, l.peer, kTagData, l.comm, &r);
    }
    MPI_Waitall(window, requests.data(), MPI_STATUSES_IGNORE);
    if (l.sender)
      MPI_Recv(ack, sizeof ack, MPI_BYTE, l.peer, kTagAck, l.comm, MPI_STATUS_IGNORE);
    else
      MPI_Send(ack, sizeof ack, MPI_BYTE, l.peer, kTagAck, l.comm);
  });
  return static_cast<double>(bytes) * window * used.iterations / s;
}

double tcp_latency(const Link& l, index_t bytes, int warmup, int iterations, double budget,
                   Used& used) {
  const int fd = l.tcp.fd();
  const auto n = static_cast<size_t>(bytes);
  const double s = run_test(l, warmup, iterations, budget, used, [&] {
    if (l.sender) {
      send_all(fd, l.out, n);
      recv_all(fd, l.in, n);
    } else {
      recv_all(fd, l.in, n);
      send_all(fd, l.out, n);
    }
  });
  return s / (2.0 * used.iterations);
}

// The window's messages streamed on the connection, then a 1-byte
// acknowledgement.
double tcp_bandwidth(const Link& l, index_t bytes, int window, int warmup, int windows,
                     double budget, Used& used) {
  const int fd = l.tcp.fd();
  const auto n = static_cast<size_t>(bytes);
  std::byte ack[1] = {};
  const double s = run_test(l, warmup, windows, budget, used, [&] {
    for (int m = 0; m < window; ++m) {
      if (l.sender)
        send_all(fd, l.out, n);
      else
        recv_all(fd, l.in, n);
    }
    if (l.sender)
      recv_all(fd, ack, sizeof ack);
    else
      send_all(fd, ack, sizeof ack);
  });
  return static_cast<double>(bytes) * window * used.iterations / s;
}

// The bandwidth test's window: as many of `window` messages as fit the
// test's budget at the latency test's one-way time for this size (at least
// one), decided by the sender and told to the receiver.
int fit_window(const Link& l, int window, double budget, double one_way_s) {
  int w = window;
  if (l.sender && budget / std::max(one_way_s, 1e-12) < window)
    w = std::max(1, static_cast<int>(budget / std::max(one_way_s, 1e-12)));
  agree(l, &w, 1);
  return w;
}

// How many of a window's messages the --check slots hold at once.
int check_slots(index_t bytes, int window) {
  return static_cast<int>(std::clamp<index_t>(kCheckBytes / bytes, 1, window));
}

// --check, untimed: round trips with a fresh pattern each way, then a
// window of distinct messages, each checked where it landed. Counts the
// messages this rank received.
Tally mpi_check(const Link& l, index_t bytes, int window) {
  Tally tally;
  for (int k = 0; k < kCheckRoundTrips; ++k) {
    const auto ping = seed(bytes, 2 * k, 0), pong = seed(bytes, 2 * k + 1, 0);
    if (l.sender) {
      fill(l.out, bytes, ping);
      MPI_Send(l.out, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm);
      MPI_Recv(l.in, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm, MPI_STATUS_IGNORE);
      tally.add(holds(l.in, bytes, pong));
    } else {
      MPI_Recv(l.in, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm, MPI_STATUS_IGNORE);
      tally.add(holds(l.in, bytes, ping));
      fill(l.out, bytes, pong);
      MPI_Send(l.out, count(bytes), MPI_BYTE, l.peer, kTagPing, l.comm);
    }
  }
  const int slots = check_slots(bytes, window);
  std::vector<MPI_Request> requests(static_cast<size_t>(slots));
  for (int first = 0; first < window; first += slots) {
    const int n = std::min(slots, window - first);
    for (int m = 0; m < n; ++m) {
      std::byte* slot = l.slots + static_cast<index_t>(m) * bytes;
      if (l.sender) {
        fill(slot, bytes, seed(bytes, 2 * kCheckRoundTrips, first + m));
        MPI_Isend(slot, count(bytes), MPI_BYTE, l.peer, kTagData, l.comm, &requests[m]);
      } else {
        MPI_Irecv(slot, count(bytes), MPI_BYTE, l.peer, kTagData, l.comm, &requests[m]);
      }
    }
    MPI_Waitall(n, requests.data(), MPI_STATUSES_IGNORE);
    for (int m = 0; m < n && !l.sender; ++m)
      tally.add(holds(l.slots + static_cast<index_t>(m) * bytes, bytes,
                      seed(bytes, 2 * kCheckRoundTrips, first + m)));
  }
  std::byte ack[4] = {};
  if (l.sender)
    MPI_Recv(ack, sizeof ack, MPI_BYTE, l.peer, kTagAck, l.comm, MPI_STATUS_IGNORE);
  else
    MPI_Send(ack, sizeof ack, MPI_BYTE, l.peer, kTagAck, l.comm);
  return tally;
}

// As mpi_check; a stream's messages arrive one after the other, each
// checked before the next lands in the buffer.
Tally tcp_check(const Link& l, index_t bytes, int window) {
  Tally tally;
  const int fd = l.tcp.fd();
  const auto n = static_cast<size_t>(bytes);
  for (int k = 0; k < kCheckRoundTrips; ++k) {
    const auto ping = seed(bytes, 2 * k, 0), pong = seed(bytes, 2 * k + 1, 0);
    if (l.sender) {
      fill(l.out, bytes, ping);
      send_all(fd, l.out, n);
      recv_all(fd, l.in, n);
      tally.add(holds(l.in, bytes, pong));
    } else {
      recv_all(fd, l.in, n);
      tally.add(holds(l.in, bytes, ping));
      fill(l.out, bytes, pong);
      send_all(fd, l.out, n);
    }
  }
  for (int m = 0; m < window; ++m) {
    const auto s = seed(bytes, 2 * kCheckRoundTrips, m);
    if (l.sender) {
      fill(l.out, bytes, s);
      send_all(fd, l.out, n);
    } else {
      recv_all(fd, l.in, n);
      tally.add(holds(l.in, bytes, s));
    }
  }
  std::byte ack[1] = {};
  if (l.sender)
    recv_all(fd, ack, sizeof ack);
  else
    send_all(fd, ack, sizeof ack);
  return tally;
}

// The receiver listens on an ephemeral port and tells the sender, over
// MPI, its host, port, addresses and a token; the sender connects to the
// first address that answers (loopback on the same host) and sends the
// token back, so that no other process's connection is taken for it.
std::string connect_pair(Link& l) {
  std::string reached;
  if (!l.sender) {
    int port = 0;
    const Socket listener = listen_any(port);
    std::random_device random;
    const std::uint64_t token = (std::uint64_t{random()} << 32) ^ random();
    std::string message = fmt::format("{}\n{}\n{}", host_name(), port, token);
    for (const auto& a : interface_addresses()) message += "\n" + a;
    MPI_Send(message.data(), static_cast<int>(message.size()), MPI_CHAR, l.peer, kTagAddress,
             l.comm);
    l.tcp = accept_within(listener, kAcceptTimeoutMs);
    std::uint64_t got = 0;
    recv_all(l.tcp.fd(), reinterpret_cast<std::byte*>(&got), sizeof got);
    if (got != token)
      throw std::runtime_error(
          fmt::format("TCP: a connection that is not from rank {} (wrong token)", l.peer));
  } else {
    MPI_Status status;
    MPI_Probe(l.peer, kTagAddress, l.comm, &status);
    int n = 0;
    MPI_Get_count(&status, MPI_CHAR, &n);
    std::string message(static_cast<size_t>(n), '\0');
    MPI_Recv(message.data(), n, MPI_CHAR, l.peer, kTagAddress, l.comm, MPI_STATUS_IGNORE);
    std::vector<std::string> lines;
    for (size_t start = 0;;) {
      const size_t end = std::min(message.find('\n', start), message.size());
      lines.push_back(message.substr(start, end - start));
      if (end == message.size()) break;
      start = end + 1;
    }
    const int port = std::stoi(lines.at(1));
    const std::uint64_t token = std::stoull(lines.at(2));
    std::vector<std::string> addresses(lines.begin() + 3, lines.end());
    if (lines[0] == host_name()) addresses.insert(addresses.begin(), "127.0.0.1");
    l.tcp = connect_first(addresses, port, reached);
    send_all(l.tcp.fd(), reinterpret_cast<const std::byte*>(&token), sizeof token);
  }
  set_no_delay(l.tcp.fd());
  return reached;
}

// OSU's shape: many iterations of small messages, fewer of large ones.
Size plan_size(index_t bytes, const NetOptions& o) {
  const int divisor = bytes < (index_t{8} << 10) ? 1 : bytes <= (index_t{1} << 20) ? 10 : 100;
  const auto scaled = [&](int n) { return n == 0 ? 0 : std::max(1, (n + divisor - 1) / divisor); };
  Size z;
  z.bytes = bytes;
  const int iterations = o.iterations.value_or(1000);
  z.iterations = scaled(iterations);
  z.warmup = scaled(o.warmup.value_or(std::max(1, iterations / 10)));
  const index_t per_window = bytes * o.window;
  z.windows = static_cast<int>(
      std::min<index_t>(z.iterations, std::max<index_t>(1, kStreamBytes / per_window)));
  z.window_warmup = z.warmup == 0
                        ? 0
                        : static_cast<int>(std::min<index_t>(
                              z.warmup, std::max<index_t>(1, kStreamBytes / 8 / per_window)));
  return z;
}

// The nodes' first ranks paired in order, the first two, the next two, ...
// (one node: all its ranks, 0:1, 2:3, ...). An odd one out sits out.
std::vector<std::pair<int, int>> default_pairs(const std::vector<int>& node_of) {
  std::vector<int> ranks;
  for (int k = 0; k < static_cast<int>(node_of.size()); ++k)
    if (node_of[static_cast<size_t>(k)] == k) ranks.push_back(k);
  if (ranks.size() < 2) {  // one node
    ranks.resize(node_of.size());
    for (size_t k = 0; k < ranks.size(); ++k) ranks[k] = static_cast<int>(k);
  }
  std::vector<std::pair<int, int>> pairs;
  for (size_t k = 0; k + 1 < ranks.size(); k += 2) pairs.emplace_back(ranks[k], ranks[k + 1]);
  return pairs;
}

std::string fixed_text(const std::string& s) {
  return s.substr(0, kTextBytes - 1);
}

// Each rank's node, named by its first rank.
std::vector<int> nodes_of_ranks(MPI_Comm world, int rank, int ranks) {
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int first_on_node = rank;
  MPI_Allreduce(&rank, &first_on_node, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  std::vector<int> node_of(static_cast<size_t>(ranks));
  MPI_Allgather(&first_on_node, 1, MPI_INT, node_of.data(), 1, MPI_INT, world);
  return node_of;
}

// What the options ask, agreed on every rank: the pairs, the transports
// (mpi first) and each size's counts.
struct NetPlan {
  std::vector<std::pair<int, int>> pairs;
  std::vector<std::string> transports;
  std::vector<Size> sizes;
  bool tcp() const {
    return std::find(transports.begin(), transports.end(), "tcp") != transports.end();
  }
};
NetPlan plan_net(const NetOptions& o, MPI_Comm world, int ranks, const std::vector<int>& node_of) {
  NetPlan plan;
  agree_on_usage(world, [&] {
    if (ranks < 2)
      throw UsageError("-np", "expected at least 2 ranks to pair (mpirun -np 2 iotest net)");
    if (o.min_size < 1)
      throw UsageError("--min-size", fmt::format("expected at least 1 byte, got {}", o.min_size));
    if (o.max_size < o.min_size || o.max_size > kMaxSize)
      throw UsageError("--max-size", fmt::format("expected {} (--min-size) to {} bytes, got {}",
                                                 o.min_size, kMaxSize, o.max_size));
    if (o.iterations && *o.iterations < 1)
      throw UsageError("--iterations", fmt::format("expected at least 1, got {}", *o.iterations));
    if (o.warmup && *o.warmup < 0)
      throw UsageError("--warmup", fmt::format("expected 0 or more, got {}", *o.warmup));
    if (!(o.time_per_size > 0) || o.time_per_size > kMaxTimePerSize)
      throw UsageError("--time-per-size", fmt::format("expected more than 0 to {} seconds, got {}",
                                                      kMaxTimePerSize, o.time_per_size));
    if (o.window < 1 || o.window > kMaxWindow)
      throw UsageError("--window",
                       fmt::format("expected 1 to {} messages, got {}", kMaxWindow, o.window));
    for (const auto& t : o.transports)
      if (t != "mpi" && t != "tcp")
        throw UsageError("--transport", "expected mpi, tcp or mpi,tcp, got '" + t + "'");
    for (const char* t : {"mpi", "tcp"})
      if (std::find(o.transports.begin(), o.transports.end(), t) != o.transports.end())
        plan.transports.emplace_back(t);
    if (plan.transports.empty()) throw UsageError("--transport", "expected mpi, tcp or mpi,tcp");
    plan.pairs = o.pairs ? parse_pairs(*o.pairs, ranks) : default_pairs(node_of);
  });
  for (index_t bytes = o.min_size; bytes <= o.max_size; bytes *= 2)
    plan.sizes.push_back(plan_size(bytes, o));
  return plan;
}

// This rank's side of the measurement: its pair, if it is in one, with
// the buffers of the largest size and the TCP connection.
struct PairSide {
  Link link;
  bool paired = false;
  Bytes out{nullptr, &std::free}, in{nullptr, &std::free}, slots{nullptr, &std::free};
  std::string reached;  // the address TCP reached
};
void join_pair(const NetOptions& o, const NetPlan& plan, MPI_Comm comm, int rank, PairSide& side) {
  auto& link = side.link;
  link.comm = comm;
  for (const auto& [a, b] : plan.pairs)
    if (rank == a || rank == b) {
      side.paired = true;
      link.sender = rank == a;
      link.peer = rank == a ? b : a;
    }
  if (!side.paired) return;
  side.out = page_aligned(plan.sizes.back().bytes);
  side.in = page_aligned(plan.sizes.back().bytes);
  index_t slot_bytes = 0;
  for (const auto& z : plan.sizes)
    slot_bytes = std::max(slot_bytes, check_slots(z.bytes, o.window) * z.bytes);
  if (o.check) side.slots = page_aligned(slot_bytes);
  link.out = side.out.get();
  link.in = side.in.get();
  link.slots = side.slots.get();
  if (plan.tcp()) side.reached = connect_pair(link);
}

// Per transport and size, a rank's figures: latency us, bandwidth MB/s,
// messages checked and wrong, then the counts used: latency round trips
// timed and warm-up, bandwidth windows timed and warm-up, messages per
// window.
constexpr size_t kFields = 9;

// One size over one transport: every pair measures at once, each test
// from a barrier, with its share (`budget`) of --time-per-size.
void measure_size(const NetOptions& o, const Size& size, bool over_tcp, double budget,
                  const PairSide& side, MPI_Comm comm, double* figures) {
  // Waited for by sleeping (iotest::barrier): ranks done measuring leave
  // the cores to the pairs still measuring.
  barrier(comm);
  double one_way_s = 0;
  if (side.paired) {
    Used used;
    one_way_s = (over_tcp ? tcp_latency : mpi_latency)(side.link, size.bytes, size.warmup,
                                                       size.iterations, budget, used);
    figures[0] = 1e6 * one_way_s;
    figures[4] = used.iterations;
    figures[5] = used.warmup;
  }
  barrier(comm);
  if (!side.paired) return;
  const int window = fit_window(side.link, o.window, budget, one_way_s);
  Used used;
  figures[1] = (over_tcp ? tcp_bandwidth : mpi_bandwidth)(
                   side.link, size.bytes, window, size.window_warmup, size.windows, budget, used) /
               1e6;
  figures[6] = used.iterations;
  figures[7] = used.warmup;
  figures[8] = window;
  if (o.check) {  // after the timing, before the next test's barrier
    const Tally tally = (over_tcp ? tcp_check : mpi_check)(side.link, size.bytes, window);
    figures[2] = static_cast<double>(tally.checked);
    figures[3] = static_cast<double>(tally.wrong);
  }
}

// This rank's figures, every size over every transport.
std::vector<double> measure_all(const NetOptions& o, const NetPlan& plan, const PairSide& side,
                                MPI_Comm comm) {
  const size_t n_sizes = plan.sizes.size();
  const double budget = o.time_per_size / (2.0 * static_cast<double>(plan.transports.size()));
  std::vector<double> mine(plan.transports.size() * n_sizes * kFields, 0.0);
  for (size_t z = 0; z < n_sizes; ++z)
    for (size_t t = 0; t < plan.transports.size(); ++t)
      measure_size(o, plan.sizes[z], plan.transports[t] == "tcp", budget, side, comm,
                   &mine[(t * n_sizes + z) * kFields]);
  return mine;
}

// On rank 0: every rank's figures, its host and the address it reached.
struct Gathered {
  std::vector<double> all;  // each rank's figures, rank after rank
  size_t per_rank = 0;
  std::vector<char> texts;  // each rank's host and address, kTextBytes each
  std::string text(int k, int field) const {
    return std::string(texts.data() + static_cast<size_t>(k) * 2 * kTextBytes +
                       static_cast<size_t>(field) * kTextBytes);
  }
  const double* figures(int k) const { return &all[static_cast<size_t>(k) * per_rank]; }
};
Gathered gather_to_rank_0(const std::vector<double>& mine, const std::string& reached,
                          MPI_Comm comm, int rank, int ranks) {
  Gathered g;
  g.per_rank = mine.size();
  g.all.resize(rank == 0 ? mine.size() * static_cast<size_t>(ranks) : 0);
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, g.all.data(),
             static_cast<int>(mine.size()), MPI_DOUBLE, 0, comm);
  char text[2][kTextBytes] = {};
  const std::string host = fixed_text(host_name()), address = fixed_text(reached);
  std::copy(host.begin(), host.end(), text[0]);
  std::copy(address.begin(), address.end(), text[1]);
  g.texts.resize(rank == 0 ? static_cast<size_t>(ranks) * sizeof text : 0);
  MPI_Gather(text, sizeof text, MPI_CHAR, g.texts.data(), sizeof text, MPI_CHAR, 0, comm);
  return g;
}

// A pair's figures: the sender's (it times both tests), the messages
// checked and wrong on both sides.
report::Interconnect::Pair pair_report(int a, int b, const NetPlan& plan, const Gathered& g) {
  report::Interconnect::Pair p;
  p.sender = a;
  p.receiver = b;
  p.sender_host = g.text(a, 0);
  p.receiver_host = g.text(b, 0);
  if (plan.tcp()) p.tcp_address = g.text(a, 1);
  const double* sender = g.figures(a);
  const double* receiver = g.figures(b);
  const size_t n_sizes = plan.sizes.size();
  p.figures.resize(plan.transports.size());
  for (size_t t = 0; t < plan.transports.size(); ++t)
    for (size_t z = 0; z < n_sizes; ++z) {
      const size_t at = (t * n_sizes + z) * kFields;
      report::Interconnect::Figure f;
      f.latency_us = sender[at];
      f.bandwidth_mb_per_s = sender[at + 1];
      f.messages_checked = static_cast<index_t>(sender[at + 2] + receiver[at + 2]);
      f.messages_wrong = static_cast<index_t>(sender[at + 3] + receiver[at + 3]);
      f.iterations = static_cast<int>(sender[at + 4]);
      f.warmup = static_cast<int>(sender[at + 5]);
      f.windows = static_cast<int>(sender[at + 6]);
      f.window_warmup = static_cast<int>(sender[at + 7]);
      f.window = static_cast<int>(sender[at + 8]);
      p.figures[t].push_back(f);
    }
  return p;
}

report::Interconnect describe_interconnect(const NetOptions& o, const NetPlan& plan,
                                           const std::vector<int>& node_of, const Gathered& g) {
  report::Interconnect n;
  const int ranks = static_cast<int>(node_of.size());
  n.ranks = ranks;
  for (int k = 0; k < ranks; ++k) n.nodes += node_of[static_cast<size_t>(k)] == k ? 1 : 0;
  n.window = o.window;
  n.time_per_size_s = o.time_per_size;
  n.transports = plan.transports;
  n.sizes = plan.sizes;
  n.checked = o.check;
  for (const auto& [a, b] : plan.pairs) {
    auto p = pair_report(a, b, plan, g);
    for (const auto& figures : p.figures)
      for (const auto& f : figures) {
        n.messages_checked += f.messages_checked;
        n.messages_wrong += f.messages_wrong;
      }
    n.pairs.push_back(std::move(p));
  }
  return n;
}

}  // namespace

std::vector<std::pair<int, int>> parse_pairs(const std::string& text, int ranks) {
  const auto number = [](std::string_view s, int& value) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  std::vector<std::pair<int, int>> pairs;
  std::vector<bool> paired(static_cast<size_t>(ranks), false);
  for (size_t start = 0;;) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string_view pair = std::string_view(text).substr(start, end - start);
    const size_t colon = pair.find(':');
    int a = 0, b = 0;
    if (colon == std::string_view::npos || !number(pair.substr(0, colon), a) ||
        !number(pair.substr(colon + 1), b))
      throw UsageError("--pairs",
                       fmt::format("expected rank pairs A:B separated by commas, got '{}'", text));
    if (a == b)
      throw UsageError("--pairs", fmt::format("expected two different ranks, got {}:{}", a, b));
    for (const int k : {a, b}) {
      if (k < 0 || k >= ranks)
        throw UsageError(
            "--pairs", fmt::format("expected ranks 0 to {}, got {} in {}:{}", ranks - 1, k, a, b));
      if (paired[static_cast<size_t>(k)])
        throw UsageError("--pairs",
                         fmt::format("expected each rank in one pair, got rank {} in two", k));
      paired[static_cast<size_t>(k)] = true;
    }
    pairs.emplace_back(a, b);
    if (end == text.size()) break;
    start = end + 1;
  }
  return pairs;
}

report::Report net(const NetOptions& o, MPI_Comm world) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &ranks);
  const auto node_of = nodes_of_ranks(world, rank, ranks);
  const auto plan = plan_net(o, world, ranks, node_of);
  // Its own communicator: no tag here meets another's.
  MPI_Comm comm;
  MPI_Comm_dup(world, &comm);
  PairSide side;
  join_pair(o, plan, comm, rank, side);
  const auto mine = measure_all(o, plan, side, comm);
  const auto gathered = gather_to_rank_0(mine, side.reached, comm, rank, ranks);
  MPI_Comm_free(&comm);

  report::Report r;
  r.mode = "net";
  if (rank != 0) return r;
  r.interconnect = describe_interconnect(o, plan, node_of, gathered);
  return r;
}

}  // namespace iotest::net
