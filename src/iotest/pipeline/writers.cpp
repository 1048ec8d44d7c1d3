#include "iotest/pipeline/writers.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"

namespace iotest::pipeline {

// The queue's header, followed by its slots' keys and data, all in one
// shared mapping.
struct ChunkQueue::Shared {
  pthread_mutex_t lock;
  pthread_cond_t not_full, not_empty;
  index_t slots = 0, chunk_values = 0;
  index_t head = 0, count = 0, high_water = 0;
  bool closed = false, failed = false;
  double push_wait_s = 0;
  char failure[512] = {};
  storage::WriteStats result;
  struct Entry {
    storage::ChunkKey key;
    index_t visibilities = 0;
  };
  Entry* entries() { return reinterpret_cast<Entry*>(this + 1); }
};

namespace {
class Hold {  // a locked pthread mutex
 public:
  explicit Hold(pthread_mutex_t& m) : m_(m) { pthread_mutex_lock(&m_); }
  ~Hold() { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t& m_;
};
size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}
}  // namespace

ChunkQueue::ChunkQueue(index_t slots, index_t chunk_values) {
  const size_t header = round_up(sizeof(Shared) + static_cast<size_t>(slots) * sizeof(Shared::Entry), 64);
  bytes_ = header + static_cast<size_t>(slots * chunk_values) * sizeof(cplx);
  void* at = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) throw std::runtime_error("cannot map the visibility queue");
  shared_ = new (at) Shared;
  shared_->slots = slots;
  shared_->chunk_values = chunk_values;
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(&shared_->lock, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_cond_init(&shared_->not_full, &ca);
  pthread_cond_init(&shared_->not_empty, &ca);
  pthread_condattr_destroy(&ca);
}

ChunkQueue::~ChunkQueue() {
  pthread_cond_destroy(&shared_->not_full);
  pthread_cond_destroy(&shared_->not_empty);
  pthread_mutex_destroy(&shared_->lock);
  munmap(shared_, bytes_);
}

cplx* ChunkQueue::slot(index_t i) const {
  const size_t header =
      round_up(sizeof(Shared) + static_cast<size_t>(shared_->slots) * sizeof(Shared::Entry), 64);
  return reinterpret_cast<cplx*>(reinterpret_cast<char*>(shared_) + header) +
         i * shared_->chunk_values;
}

void ChunkQueue::push(const storage::ChunkKey& key, const cplx* data, index_t visibilities) {
  Hold hold(shared_->lock);
  if (shared_->count == shared_->slots && !shared_->failed) {
    const auto start = Clock::now();
    while (shared_->count == shared_->slots && !shared_->failed)
      pthread_cond_wait(&shared_->not_full, &shared_->lock);
    shared_->push_wait_s += seconds_since(start);
  }
  if (shared_->failed) throw std::runtime_error(shared_->failure);
  const index_t i = (shared_->head + shared_->count) % shared_->slots;
  shared_->entries()[i] = {key, visibilities};
  std::memcpy(slot(i), data, static_cast<size_t>(shared_->chunk_values) * sizeof(cplx));
  shared_->high_water = std::max(shared_->high_water, ++shared_->count);
  pthread_cond_signal(&shared_->not_empty);
}

bool ChunkQueue::pop(storage::ChunkKey& key, cplx* data, index_t& visibilities) {
  Hold hold(shared_->lock);
  while (shared_->count == 0 && !shared_->closed && !shared_->failed)
    pthread_cond_wait(&shared_->not_empty, &shared_->lock);
  if (shared_->count == 0 || shared_->failed) return false;
  const index_t i = shared_->head;
  key = shared_->entries()[i].key;
  visibilities = shared_->entries()[i].visibilities;
  std::memcpy(data, slot(i), static_cast<size_t>(shared_->chunk_values) * sizeof(cplx));
  shared_->head = (i + 1) % shared_->slots;
  --shared_->count;
  pthread_cond_signal(&shared_->not_full);
  return true;
}

void ChunkQueue::close() {
  Hold hold(shared_->lock);
  shared_->closed = true;
  pthread_cond_broadcast(&shared_->not_empty);
}

void ChunkQueue::fail(const std::string& message) {
  Hold hold(shared_->lock);
  shared_->failed = true;
  std::snprintf(shared_->failure, sizeof(shared_->failure), "%s", message.c_str());
  pthread_cond_broadcast(&shared_->not_full);
  pthread_cond_broadcast(&shared_->not_empty);
}

void ChunkQueue::set_result(const storage::WriteStats& stats) {
  Hold hold(shared_->lock);
  shared_->result = stats;
}
storage::WriteStats ChunkQueue::result() const {
  Hold hold(shared_->lock);
  return shared_->result;
}
std::string ChunkQueue::failure() const {
  Hold hold(shared_->lock);
  return shared_->failed ? shared_->failure : "";
}
index_t ChunkQueue::high_water() const {
  Hold hold(shared_->lock);
  return shared_->high_water;
}
double ChunkQueue::push_wait_s() const {
  Hold hold(shared_->lock);
  return shared_->push_wait_s;
}

namespace {

// One writer's whole life: open, write what comes, close. Failures go to
// the queue (pushers see them and stop) and leave no complete-looking output.
void run_writer(ChunkQueue& queue, const std::string& backend_name, const std::string& path,
                const storage::VisibilityLayout& layout) {
  std::unique_ptr<storage::Backend> backend;
  try {
    backend = storage::make_backend(backend_name);
    backend->open(path, layout);
    std::vector<cplx> chunk(static_cast<size_t>(layout.chunk_values()));
    storage::ChunkKey key;
    index_t visibilities = 0;
    while (queue.pop(key, chunk.data(), visibilities))
      backend->write_chunk(key, chunk.data(), visibilities);
    if (!queue.failure().empty()) {  // stopped from outside: no complete-looking output
      backend->abort();
      return;
    }
    backend->close();
    queue.set_result(backend->stats());
  } catch (const std::exception& e) {
    if (backend) backend->abort();
    queue.fail(path.empty() ? e.what() : path + ": " + e.what());
  }
}

}  // namespace

Writers::Writers(const WriterOptions& options, const storage::VisibilityLayout& layout)
    : options_(options), layout_(layout) {
  if (options_.queue_slots < 1) throw std::logic_error("a writer queue needs a slot");
  for (size_t i = 0; i < options_.paths.size(); ++i) {
    queues_.push_back(std::make_unique<ChunkQueue>(options_.queue_slots, layout.chunk_values()));
    start(i);
  }
}

void Writers::start(size_t i) {
  auto& queue = *queues_[i];
  const auto& path = options_.paths[i];
  if (!options_.fork) {
    threads_.emplace_back(
        [this, &queue, path] { run_writer(queue, options_.backend, path, layout_); });
    return;
  }
  std::fflush(nullptr);  // nothing buffered twice
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("cannot fork a writer process");
  if (child == 0) {
    // The child writes and leaves without running the parent's exit
    // handlers (MPI's among them).
    run_writer(queue, options_.backend, path, layout_);
    _exit(queue.failure().empty() ? 0 : 1);
  }
  children_.push_back(child);
}

void Writers::write(const storage::ChunkKey& key, const cplx* data, index_t visibilities) {
  const auto n = static_cast<index_t>(queues_.size());
  const index_t writer = (key.row_chunk * layout_.freq_chunks() + key.freq_chunk) % n;
  queues_[static_cast<size_t>(writer)]->push(key, data, visibilities);
}

std::vector<storage::WriteStats> Writers::finish() {
  finished_ = true;
  for (auto& q : queues_) q->close();
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::string failure;
  for (size_t i = 0; i < children_.size(); ++i) {
    int status = 0;
    waitpid(children_[i], &status, 0);
    if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && queues_[i]->failure().empty())
      failure = options_.paths[i] + ": the writer process died";
  }
  children_.clear();
  std::vector<storage::WriteStats> stats;
  for (auto& q : queues_) {
    if (failure.empty()) failure = q->failure();
    stats.push_back(q->result());
  }
  if (!failure.empty()) throw std::runtime_error(failure);
  return stats;
}

Writers::~Writers() {
  if (finished_) return;
  // Failing elsewhere: stop the writers; each drops its partial output.
  for (auto& q : queues_) q->fail("stopped");
  for (auto& q : queues_) q->close();
  for (auto& t : threads_) t.join();
  for (const pid_t child : children_) waitpid(child, nullptr, 0);
}

index_t Writers::high_water() const {
  index_t h = 0;
  for (const auto& q : queues_) h = std::max(h, q->high_water());
  return h;
}

double Writers::wait_s() const {
  double s = 0;
  for (const auto& q : queues_) s += q->push_wait_s();
  return s;
}

void check_creatable(const std::string& path) {
  const std::string probe = path + ".partial";
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (!f) throw UsageError("OUTPUT", "cannot create '" + probe + "': " + std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}

std::string output_path(const std::string& pattern, index_t index, index_t writers_in_all) {
  const auto at = pattern.find("%d");
  if (at != std::string::npos)
    return pattern.substr(0, at) + std::to_string(index) + pattern.substr(at + 2);
  if (writers_in_all <= 1) return pattern;
  const auto dot = pattern.rfind('.');
  const auto slash = pattern.rfind('/');
  const auto cut = dot != std::string::npos && (slash == std::string::npos || dot > slash)
                       ? dot
                       : pattern.size();
  return pattern.substr(0, cut) + "." + std::to_string(index) + pattern.substr(cut);
}

}  // namespace iotest::pipeline
