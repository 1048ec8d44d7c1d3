#include "iotest/pipeline/read.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>

#include "iotest/common/errors.hpp"
#include "iotest/common/mpi_agree.hpp"
#include "iotest/common/mpi_wait.hpp"
#include "iotest/common/system.hpp"
#include "iotest/degrid/tasks.hpp"
#include "iotest/pipeline/run.hpp"

namespace iotest::pipeline {
namespace {

// The page cache emptied on this node (root only): dirty pages synced,
// then clean ones dropped, so reads come from the device.
void drop_page_cache() {
  ::sync();
  std::ofstream control("/proc/sys/vm/drop_caches");
  control << "3\n";
  control.flush();
  if (!control) throw std::runtime_error("writing /proc/sys/vm/drop_caches failed");
}

struct RankTotals {
  index_t files = 0, chunks = 0, bytes = 0, values_checked = 0, values_wrong = 0, values_right = 0;
  double open_s = 0, read_s = 0;
};

// This rank's files, opened (their indexes read), the chunks it reads of
// each in stored order, and what it measured.
struct RankFiles {
  std::vector<std::unique_ptr<storage::Reader>> files;
  std::vector<std::string> names;
  std::vector<std::vector<storage::ChunkKey>> order;
  RankTotals totals;
};

// What rank 0 gathers: every rank's totals, and its host (kHostBytes each).
constexpr size_t kHostBytes = 64;
struct Gathered {
  std::vector<RankTotals> all;
  std::vector<char> hosts;
};

void check_usage(const ReadOptions& o, MPI_Comm comm) {
  agree_on_usage(comm, [&] {
    if (o.files.empty()) throw UsageError("FILES", "expected the files of a run's output");
    // Root, and a /proc/sys that is not read-only (containers often mount it so).
    if (o.drop_caches && ::access("/proc/sys/vm/drop_caches", W_OK) != 0)
      throw UsageError("--drop-caches",
                       "needs to write /proc/sys/vm/drop_caches (root, outside "
                       "a container that mounts /proc/sys read-only)");
  });
}

// A shared file's stored chunks, cut into one contiguous stretch per rank
// of the file: this rank's (file i's ranks are i, i + files, ...).
void keep_my_stretch(std::vector<storage::ChunkKey>& keys, int i, int rank, int size, int n_files) {
  const auto sharers = static_cast<size_t>((size - i + n_files - 1) / n_files);
  const auto share = static_cast<size_t>(rank / n_files), n = keys.size();
  keys =
      std::vector<storage::ChunkKey>(keys.begin() + static_cast<long>(n * share / sharers),
                                     keys.begin() + static_cast<long>(n * (share + 1) / sharers));
}

// File i goes to rank i mod N. With more ranks than files (one shared
// phdf5 file), the ranks of a file cut its stored chunks into contiguous
// stretches, one each, read in stored order. Opened before the timing.
RankFiles open_files(const ReadOptions& o, int rank, int size, MPI_Comm comm) {
  RankFiles mine;
  const auto n_files = static_cast<int>(o.files.size());
  const bool sharing = size > n_files;
  agree_on_usage(comm, [&] {
    for (int i = sharing ? rank % n_files : rank; i < n_files; i += sharing ? n_files : size) {
      const auto start = Clock::now();
      const auto& name = o.files[static_cast<size_t>(i)];
      // Watched, as every read is, by the reader itself (watched_reader.hpp).
      mine.files.push_back(storage::open_reader(name, o.storage));
      mine.order.push_back(mine.files.back()->stored_chunks());
      mine.names.push_back(name);
      if (sharing) keep_my_stretch(mine.order.back(), i, rank, size, n_files);
      mine.totals.open_s += seconds_since(start);
      const auto& pv = mine.files.back()->provenance();
      if (o.check && !(pv && pv->synthetic))
        throw UsageError("--check", fmt::format("{} is not a --synthetic-vis set (check sky sets "
                                                "with iotest verify)",
                                                mine.names.back()));
    }
  });
  mine.totals.files = static_cast<index_t>(mine.files.size());
  return mine;
}

// The set's run: file 0's (rank 0 reads it). A file of another run (a
// stale one) then fails --check in every value.
std::uint32_t set_nonce(const RankFiles& mine, MPI_Comm comm) {
  std::uint32_t nonce =
      mine.files.empty() || !mine.files[0]->provenance() ? 0 : mine.files[0]->provenance()->nonce;
  MPI_Bcast(&nonce, 1, MPI_UINT32_T, 0, comm);
  return nonce;
}

// --drop-caches: once per node, before anyone reads.
void drop_page_caches_per_node(MPI_Comm comm) {
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_rank = 0;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_free(&node);
  if (node_rank == 0) drop_page_cache();
}

// Every chunk of this rank's share, into one buffer of the largest chunk,
// page-aligned so that O_DIRECT reads land in it without a copy; only the
// read calls are timed, and --check checks each chunk as it comes.
void read_chunks(RankFiles& mine, bool check, std::uint32_t nonce, degrid::PatternCheck& pattern) {
  index_t largest = 0;
  for (const auto& file : mine.files)
    largest = std::max(largest, file->chunk_rows() * file->chunk_channels());
  const size_t chunk_bytes = static_cast<size_t>(largest) * sizeof(cplx);
  std::unique_ptr<cplx, decltype(&std::free)> buffer(
      static_cast<cplx*>(std::aligned_alloc(4096, (chunk_bytes + 4095) / 4096 * 4096)), &std::free);
  if (!buffer) throw std::bad_alloc();
  cplx* chunk = buffer.get();
  for (size_t f = 0; f < mine.files.size(); ++f) {
    const auto& file = *mine.files[f];
    const index_t rows = file.chunk_rows(), chans = file.chunk_channels();
    for (const auto& key : mine.order[f]) {
      const auto start = Clock::now();
      if (!file.read_chunk(key, chunk))
        throw std::runtime_error(mine.names[f] + ": a chunk of its index could not be read");
      mine.totals.read_s += seconds_since(start);
      ++mine.totals.chunks;
      mine.totals.bytes += rows * chans * static_cast<index_t>(sizeof(cplx));
      if (check) pattern.add(file, mine.names[f], key, chunk, nonce);
    }
  }
}

// Each rank's totals and host, to rank 0.
Gathered gather_totals(const RankTotals& mine, int size, MPI_Comm comm) {
  Gathered g;
  g.all.resize(static_cast<size_t>(size));
  static_assert(std::is_trivially_copyable_v<RankTotals>);
  MPI_Gather(&mine, sizeof mine, MPI_BYTE, g.all.data(), sizeof mine, MPI_BYTE, 0, comm);
  char host[kHostBytes] = {};
  const std::string me = host_name().substr(0, sizeof host - 1);
  std::copy(me.begin(), me.end(), host);
  g.hosts.resize(static_cast<size_t>(size) * sizeof host);
  MPI_Gather(host, sizeof host, MPI_CHAR, g.hosts.data(), sizeof host, MPI_CHAR, 0, comm);
  return g;
}

// The first wrong value, from the first rank that found one, to rank 0.
void first_wrong_to_root(std::string& first_wrong, index_t wrong, int rank, int size,
                         MPI_Comm comm) {
  int wrong_rank = wrong > 0 ? rank : size, first_rank = size;
  MPI_Allreduce(&wrong_rank, &first_rank, 1, MPI_INT, MPI_MIN, comm);
  if (first_rank >= size || first_rank == 0) return;
  if (rank == first_rank) {
    MPI_Send(first_wrong.data(), static_cast<int>(first_wrong.size()), MPI_CHAR, 0, 0, comm);
  } else if (rank == 0) {
    MPI_Status status;
    MPI_Probe(first_rank, 0, comm, &status);
    int n = 0;
    MPI_Get_count(&status, MPI_CHAR, &n);
    first_wrong.assign(static_cast<size_t>(n), '\0');
    MPI_Recv(first_wrong.data(), n, MPI_CHAR, first_rank, 0, comm, MPI_STATUS_IGNORE);
  }
}

// Rank 0's report: the ranks' totals summed, each rank's own, the verdict
// of --check, and the rate over the slowest rank's reading phase.
report::Reading summarize(const ReadOptions& o, const storage::Reader& first, const Gathered& g,
                          const std::string& first_wrong, double wall) {
  report::Reading d;
  d.files = o.files;
  d.backend = first.backend();
  d.ranks = static_cast<int>(g.all.size());
  d.direct = first.direct();
  d.caches_dropped = o.drop_caches;
  d.checked = o.check;
  d.first_wrong = first_wrong;
  for (int k = 0; k < d.ranks; ++k) {
    const auto& t = g.all[static_cast<size_t>(k)];
    d.chunks += t.chunks;
    d.bytes += t.bytes;
    d.open_s += t.open_s;
    d.read_s += t.read_s;
    d.values_checked += t.values_checked;
    d.values_wrong += t.values_wrong;
    d.values_right += t.values_right;
    d.per_rank.push_back({k, std::string(g.hosts.data() + static_cast<size_t>(k) * kHostBytes),
                          t.files, t.chunks, t.bytes, t.open_s, t.read_s});
  }
  if (o.check) {
    if (!first.provenance()->stonewalled)
      d.values_expected = first.baselines() * first.times() * first.channels();
    d.passed =
        d.values_wrong == 0 && (d.values_expected < 0 || d.values_right == d.values_expected);
  }
  d.wall_s = wall;
  d.bytes_per_s = wall > 0 ? static_cast<double>(d.bytes) / wall : 0;
  return d;
}

}  // namespace

report::Report read(const ReadOptions& o, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  check_usage(o, comm);
  RankFiles mine = open_files(o, rank, size, comm);
  const std::uint32_t nonce = set_nonce(mine, comm);
  if (o.drop_caches) drop_page_caches_per_node(comm);

  // The reading phase, barrier to this rank's last chunk. The barriers
  // sleep (Open MPI's MPI_Barrier spins): a rank done early must not take
  // the cores of those still reading.
  barrier(comm);
  const double t0 = MPI_Wtime();
  degrid::PatternCheck pattern;
  read_chunks(mine, o.check, nonce, pattern);
  const double wall_mine = MPI_Wtime() - t0;
  barrier(comm);
  mine.totals.values_checked = pattern.checked;
  mine.totals.values_right = pattern.right;
  mine.totals.values_wrong = pattern.wrong;
  std::string first_wrong = pattern.first_wrong;

  // To rank 0: each rank's totals (and its host), the slowest rank's time.
  double wall = 0;
  MPI_Reduce(&wall_mine, &wall, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
  const Gathered gathered = gather_totals(mine.totals, size, comm);
  first_wrong_to_root(first_wrong, mine.totals.values_wrong, rank, size, comm);

  report::Report r;
  r.mode = "read";
  if (rank != 0) return r;
  // Rank 0 reads file 0: the set's backend, layout and provenance.
  r.reading = summarize(o, *mine.files[0], gathered, first_wrong, wall);
  return r;
}

}  // namespace iotest::pipeline
